package room

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/nats-io/nats.go/jetstream"

	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// Log lines of a block and of its end.
const (
	logBlocked   = "the stream has no room for the next event"
	logRoomAgain = "the stream has room again"
)

// blockedSeries is the relay's gauge for stream and reason.
func blockedSeries(stream, reason string) string {
	return fmt.Sprintf(`outbox_relay_stream_blocked{reason=%q,stream=%q}`, reason, stream)
}

// blockedLine is the relay's log line of a block: what it says.
type blockedLine struct {
	Stream  string `json:"stream"`
	Reason  string `json:"reason"`
	Limit   string `json:"limit"`
	Fix     string `json:"fix"`
	EventID string `json:"event_id"`
	LSN     string `json:"lsn"`
	Message string `json:"message"`
}

// blockedLines returns the relay's block log lines so far.
func blockedLines(r *relaytest.Relay) []blockedLine {
	var out []blockedLine
	for _, line := range strings.Split(r.Logs(), "\n") {
		var l blockedLine
		if json.Unmarshal([]byte(line), &l) == nil && strings.HasPrefix(l.Message, logBlocked) {
			out = append(out, l)
		}
	}
	return out
}

// block is a block as the test saw it: the event the relay holds and the
// highest position the slot confirmed while it held it.
type block struct {
	env      *relaytest.Env
	reason   string
	held     pglogrepl.LSN // commit LSN of the event held at the head
	heldID   string
	stored   uint64 // messages in the stream when the block was seen, 0 when unreadable
	highest  pglogrepl.LSN
	readable bool
	// roomBase and outageBase count the relay's log lines of room again
	// and of an outage over when the block was seen.
	roomBase, outageBase int
}

// blocks counts the relay's block log lines so far: pass it to
// waitBlocked before the fault.
func blocks(r *relaytest.Relay) int { return len(blockedLines(r)) }

// waitBlocked waits until relay says, in a block log line after the first
// after ones, that the stream has no room for reason, with fix, and sets
// its gauge; then checks the log's figures, that status says the same,
// and that the slot confirms nothing past the event held. readable says
// whether the stream can be read meanwhile (not so without a quorum).
func waitBlocked(t *testing.T, env *relaytest.Env, relay *relaytest.Relay, after int, reason, fix string, readable bool) *block {
	t.Helper()
	var line blockedLine
	relaytest.WaitFor(t, relaytest.FaultWait, fmt.Sprintf("the relay to log %q with reason %s", logBlocked, reason), func() bool {
		lines := blockedLines(relay)
		for _, l := range lines[min(after, len(lines)):] {
			if l.Reason == reason {
				line = l
				return true
			}
		}
		return relay.Exited()
	})
	if relay.Exited() {
		t.Fatalf("the relay exited while blocked; log:\n%s", relay.Logs())
	}
	if line.Stream != env.Stream || !strings.Contains(line.Fix, fix) || line.Limit == "" || line.EventID == "" {
		t.Errorf("the block's log line: stream %q, limit %q, fix %q, event %q; want stream %q and a fix with %q", line.Stream, line.Limit, line.Fix, line.EventID, env.Stream, fix)
	}
	t.Logf("blocked (%s): %s; fix: %s", reason, line.Limit, line.Fix)
	series := blockedSeries(env.Stream, reason)
	relaytest.WaitFor(t, 10*time.Second, series+" = 1", func() bool {
		v, err := relay.Metric(series)
		return err == nil && v == 1
	})
	held, err := pglogrepl.ParseLSN(line.LSN)
	if err != nil {
		t.Fatalf("the block's log line names the held event's LSN %q: %v", line.LSN, err)
	}
	b := &block{env: env, reason: reason, held: held, heldID: line.EventID, readable: readable,
		roomBase: relay.CountLog(logRoomAgain), outageBase: relay.CountLog(relaytest.LogOutageOver)}
	if readable {
		b.stored = env.CountStored()
		if ids := relaytest.StoredByID(t, env); ids[b.heldID] != nil {
			t.Errorf("the event the relay says it holds, %s, is in the stream already", b.heldID)
		}
	}
	requireStatus(t, env, reason, fix)
	b.watch(t, 3*time.Second)
	return b
}

// requireStatus runs `status --json` and requires it to report the block:
// its reason, its fix, exit 1.
func requireStatus(t *testing.T, env *relaytest.Env, reason, fix string) {
	t.Helper()
	var last string
	relaytest.WaitFor(t, 30*time.Second, "status to report the block", func() bool {
		stdout, stderr, code := suite.Relay.RunSplit(t, append([]string{"status", "--json"}, env.ToolArgs()...)...)
		var r struct {
			Blocked  *jssink.Blocked `json:"blocked"`
			Problems []string        `json:"problems"`
		}
		last = fmt.Sprintf("exit %d, stdout %s, stderr %s", code, stdout, stderr)
		return json.Unmarshal([]byte(stdout), &r) == nil && code == 1 && r.Blocked != nil &&
			r.Blocked.Reason == reason && strings.Contains(r.Blocked.Fix, fix) && len(r.Problems) > 0
	})
	t.Logf("status: %s", last)
}

// watch samples the slot's confirmed position for d: it must not pass
// the held event.
func (b *block) watch(t *testing.T, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		b.highest = max(b.highest, b.env.SlotInfo().ConfirmedFlush)
	}
	if b.highest > b.held {
		t.Errorf("while the relay held event %s (commit %s), the slot confirmed %s", b.heldID, b.held, b.highest)
	}
	if b.readable {
		if n := b.env.CountStored(); n != b.stored {
			t.Errorf("the stream went from %d to %d messages while it had no room", b.stored, n)
		}
	}
}

// killWhileBlocked SIGKILLs the relay while the stream has no room, holds
// the restart past the 1 s duplicate window, starts a new relay and waits
// until it is blocked too (log, gauge, status), the slot still short of
// the held event.
func (b *block) killWhileBlocked(t *testing.T, relay *relaytest.Relay, fix string, flags ...string) *relaytest.Relay {
	t.Helper()
	relay.Kill()
	time.Sleep(2 * b.env.DuplicateWindow)
	next := suite.StartRelay(t, b.env, flags...)
	again := waitBlocked(t, b.env, next, 0, b.reason, fix, b.readable)
	if again.heldID != b.heldID {
		t.Errorf("after the restart the relay holds event %s, before it held %s", again.heldID, b.heldID)
	}
	b.highest = max(b.highest, again.highest)
	b.roomBase, b.outageBase = again.roomBase, again.outageBase
	return next
}

// requireRoomAgain waits until relay stored the held event and says the
// block is over: the log, the gauge back at 0, status without it.
func (b *block) requireRoomAgain(t *testing.T, relay *relaytest.Relay) {
	t.Helper()
	relaytest.WaitLogCount(t, relay, logRoomAgain, b.roomBase+1, relaytest.FaultWait)
	relaytest.WaitLogCount(t, relay, relaytest.LogOutageOver, b.outageBase+1, relaytest.FaultWait)
	if v, err := relay.Metric(blockedSeries(b.env.Stream, b.reason)); err != nil || v != 0 {
		t.Errorf("%s = %v (%v) once the stream has room again", blockedSeries(b.env.Stream, b.reason), v, err)
	}
}

// settle ends a case: the load stopped, every committed event stored once,
// none as a dead letter.
func settle(t *testing.T, env *relaytest.Env, relay *relaytest.Relay, w *relaytest.Workload, stop func(), x relaytest.Expect) {
	t.Helper()
	w.WaitTx(t, 20, relaytest.FaultWait)
	stop()
	x.MinTx = max(x.MinTx, 40)
	res := relaytest.Settle(t, env, relay, w, x)
	if res.DeadLetters > 0 {
		t.Errorf("%d events went to the dead-letter subject: no room is never a reason to dead-letter", res.DeadLetters)
	}
	if res.OutOfOrder() > 0 {
		t.Logf("%d events stored out of commit order (the documented case: the server refused one and stored the next): %v", res.OutOfOrder(), res.Inversions)
	}
}

// createStream creates the stream as an operator would, retrying while a
// cluster is still meeting its peers.
func createStream(t *testing.T, env *relaytest.Env, cfg jetstream.StreamConfig) jetstream.Stream {
	t.Helper()
	cfg.Name, cfg.Subjects = env.Stream, []string{"outbox.*.*", env.DeadSubj}
	cfg.Storage, cfg.Discard, cfg.Duplicates = jetstream.FileStorage, jetstream.DiscardNew, env.DuplicateWindow
	for deadline := time.Now().Add(relaytest.FaultWait); ; time.Sleep(200 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		stream, err := env.JS.CreateStream(ctx, cfg)
		cancel()
		if err == nil {
			return stream
		}
		if time.Now().After(deadline) {
			t.Fatalf("create stream %s: %v", cfg.Name, err)
		}
	}
}

// updateStream changes the stream's configuration as an operator would
// (nats stream edit).
func updateStream(t *testing.T, env *relaytest.Env, edit func(*jetstream.StreamConfig)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := env.JS.Stream(ctx, env.Stream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	edit(&cfg)
	if _, err := env.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("update stream %s: %v", env.Stream, err)
	}
}
