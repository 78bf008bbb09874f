package replay

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// window writes rows before, in and after a range of whole seconds (the
// flags' precision) and returns the range's bounds and its rows' ids in
// commit order, with the ids of aggregate order/2 among them.
func window(t *testing.T, env *relaytest.Env) (since, until time.Time, in, agg2 []string) {
	env.Tx(relaytest.NewRow("order", "1", "before", `{}`))
	since = nextSecond(t, env)
	in = append(in, env.Tx(relaytest.NewRow("order", "1", "in", `{"n":1}`), relaytest.NewRow("order", "1", "in", `{"n":2}`))...)
	agg2 = env.Tx(relaytest.NewRow("order", "2", "in", `{"n":3}`))
	in = append(in, agg2...)
	in = append(in, env.Tx(relaytest.NewRow("order", "1", "in", `{"n":4}`))...)
	until = nextSecond(t, env)
	env.Tx(relaytest.NewRow("order", "2", "after", `{}`))
	return since, until, in, agg2
}

// nextSecond waits until Postgres's clock has passed the next whole
// second, and returns it.
func nextSecond(t *testing.T, env *relaytest.Env) time.Time {
	var now time.Time
	if err := env.Pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	next := now.Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(time.Now().Add(next.Sub(now) + 50*time.Millisecond)))
	return next.UTC()
}

func rfc(t time.Time) string { return t.Format(time.RFC3339) }

// addStream creates a stream storing subjects.
func addStream(t *testing.T, env *relaytest.Env, name, subjects string) jetstream.Stream {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := env.JS.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subjects}, Duplicates: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// messages returns a stream's messages in order.
func messages(t *testing.T, s jetstream.Stream) []*jetstream.RawStreamMsg {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

var runIDRE = regexp.MustCompile(`replay run (\S+) `)

// replay runs the command and returns the run id it printed.
func replay(t *testing.T, env *relaytest.Env, args ...string) (string, string) {
	t.Helper()
	out, err := suite.Relay.RunCLI(t, append(append([]string{"replay"}, env.ToolArgs()...), args...)...)
	if err != nil {
		t.Fatalf("replay %v: %v\n%s", args, err, out)
	}
	m := runIDRE.FindStringSubmatch(out)
	if m == nil {
		return "", out
	}
	return m[1], out
}

// requireCopies: the stream holds exactly the copies of ids, in order,
// marked, under the run's ids, on prefix's subjects.
func requireCopies(t *testing.T, msgs []*jetstream.RawStreamMsg, run, prefix string, ids []string) {
	t.Helper()
	var got, want []string
	for _, m := range msgs {
		got = append(got, m.Header.Get(contract.HeaderMsgID))
		if m.Header.Get(contract.HeaderReplay) != contract.ReplayCopy || !strings.HasPrefix(m.Subject, prefix) {
			t.Errorf("copy on %s with %s %q, want %s.… marked %q", m.Subject, contract.HeaderReplay, m.Header.Get(contract.HeaderReplay), prefix, contract.ReplayCopy)
		}
	}
	for _, id := range ids {
		want = append(want, contract.ReplayMsgID(run, id))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("copies %v, want %v", got, want)
	}
}

// TestReplayRange: a relay streams rows; replay republishes exactly those
// of the range, in commit order, marked, under ids of their own, to a
// subject prefix or another stream; --aggregate-id picks one aggregate's;
// --dry-run only counts; a rerun of a run stores nothing twice.
func TestReplayRange(t *testing.T) {
	env := suite.NewEnv(t)
	relay := suite.StartRelay(t, env)
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	since, until, in, agg2 := window(t, env)
	env.WaitStored(len(env.TableIDs()), 30*time.Second)
	copies := addStream(t, env, "REPLAY", "replay.>")
	rng := []string{"--since", rfc(since), "--until", rfc(until)}

	_, out := replay(t, env, append(rng, "--subject-prefix", "replay", "--dry-run")...)
	if !strings.Contains(out, "4 rows to replay (dry run") {
		t.Errorf("dry run said:\n%s", out)
	}
	if n := len(messages(t, copies)); n != 0 {
		t.Fatalf("a dry run published %d messages", n)
	}

	run, out := replay(t, env, append(rng, "--subject-prefix", "replay", "--progress", "100ms")...)
	if run == "" || !strings.Contains(out, "replayed 4 of 4 rows") || !strings.Contains(out, `"rows":4`) {
		t.Fatalf("replay said:\n%s", out)
	}
	requireCopies(t, messages(t, copies), run, "replay.outbox.", in)

	// The same run again: it goes on after its last copy, which is the last row.
	if _, out := replay(t, env, append(rng, "--subject-prefix", "replay", "--run-id", run)...); !strings.Contains(out, "replayed 0 of 4 rows") || !strings.Contains(out, "4 stored by the run before") {
		t.Errorf("rerun said:\n%s", out)
	}
	requireCopies(t, messages(t, copies), run, "replay.outbox.", in)

	if err := copies.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
	run, _ = replay(t, env, append(rng, "--subject-prefix", "replay", "--aggregate-id", "2")...)
	requireCopies(t, messages(t, copies), run, "replay.outbox.", agg2)

	other := addStream(t, env, "REBUILD", "rebuild.>")
	run, _ = replay(t, env, append(rng, "--to-stream", "REBUILD")...)
	requireCopies(t, messages(t, other), run, "rebuild.outbox.", in)

	// Nowhere, or the relay's stream by name: refused, saying how to ask for it.
	for _, args := range [][]string{rng, append(rng, "--to-stream", env.Stream)} {
		if out, err := suite.Relay.RunCLI(t, append(append([]string{"replay"}, env.ToolArgs()...), args...)...); err == nil || !strings.Contains(out, "--into-relay-stream") {
			t.Errorf("replay %v: %v\n%s", args, err, out)
		}
	}
	relaytest.StopRelay(t, relay)
}

// TestReplayIntoRelayStream: copies published into the relay's own
// stream, after a batch the relay stored but had not confirmed when it was
// killed, blind neither the relay's resume nor verify: restarted past the
// 1 s duplicate window, it skips the batch it stored (no duplicate, none
// missing), and verify reports the stream OK.
func TestReplayIntoRelayStream(t *testing.T) {
	env := suite.NewEnv(t)
	relay := suite.StartRelay(t, env)
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	since := nextSecond(t, env)
	env.Tx(relaytest.NewRow("order", "o", "older", `{}`))
	env.WaitStored(1, 30*time.Second)
	env.WaitSlotCaughtUp(relaytest.FaultWait)
	relaytest.StopRelay(t, relay)

	killed := suite.KillBeforeConfirm(t, env, func(attempt int) {
		if attempt == 0 {
			// Copies while the relay runs, then after its batch: the
			// newest messages of the stream when it restarts.
			replay(t, env, "--since", rfc(since), "--into-relay-stream")
		}
	})
	run, _ := replay(t, env, "--since", rfc(since), "--into-relay-stream")
	msgs := relaytest.StreamInOrder(t, env)
	if m := msgs[len(msgs)-1]; m.Header.Get(contract.HeaderReplay) != contract.ReplayCopy || !strings.HasPrefix(m.Header.Get(contract.HeaderMsgID), contract.ReplayMsgID(run, "")) {
		t.Fatalf("the stream's last message is not a copy of run %s: %v", run, m.Header)
	}

	time.Sleep(time.Until(killed.Add(2 * env.DuplicateWindow)))
	relay = suite.StartRelay(t, env)
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	relaytest.RequireLog(t, relay, relaytest.LogSkipStored, 1)
	env.Tx(relaytest.NewRow("order", "y", "after.restart", `{}`))
	env.WaitRows(time.Minute)
	env.WaitSlotCaughtUp(relaytest.FaultWait)
	relay.Drain(30 * time.Second)
	res := env.CheckWith(relaytest.Expect{})
	t.Logf("check: %s", res)
	if len(res.Duplicates) != 0 || len(res.Missing) != 0 || len(res.Extra) != 0 {
		t.Errorf("after the copies: duplicated %v, missing %v, extra %v", res.Duplicates, res.Missing, res.Extra)
	}
	args := append([]string{"verify"}, env.ToolArgs()...)
	if out, err := suite.Relay.RunCLI(t, args...); err != nil || !strings.Contains(out, "OK:") {
		t.Fatalf("verify with copies in the stream (%v):\n%s", err, out)
	}
}
