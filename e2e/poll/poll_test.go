package poll

import (
	"context"
	"encoding/json"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// settlePolled ends a polling fault case with the load stopped: every row
// processed and in the stream, JetStream acknowledged no publish of the
// relay as a duplicate, SIGTERM drains the relay (exit 0), and the check
// holds (up to maxDup events stored twice tolerated).
func settlePolled(t *testing.T, env *relaytest.Env, relay *relaytest.Relay, w *relaytest.Workload, minTx, maxDup int) relaytest.Result {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for relaytest.PendingRows(t, env) > 0 {
		if time.Now().After(deadline) || relay.Exited() {
			t.Fatalf("%d rows still pending; log:\n%s", relaytest.PendingRows(t, env), relay.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	env.WaitRows(time.Minute)
	requireNoDuplicateAcks(t, relay)
	relay.Drain(30 * time.Second)
	res := env.CheckWith(relaytest.Expect{Workload: w, Polled: true, MinTx: minTx, StoredDuplicates: maxDup})
	t.Logf("check: %s", res)
	return res
}

// requireNoDuplicateAcks fails the test unless JetStream acknowledged no
// publish of the relay as a duplicate so far: within the duplicate window
// a copy of an event the stream holds is dropped and only its PubAck says
// it was sent again.
func requireNoDuplicateAcks(t *testing.T, relay *relaytest.Relay) {
	t.Helper()
	if n, err := relay.Metric(relaytest.DuplicateAcksMetric); err != nil || n != 0 {
		t.Errorf("%s = %v (%v): the polling relay published again events the stream held", relaytest.DuplicateAcksMetric, n, err)
	}
}

// TestPollFaultRelayKilledRepeatedly: the polling relay is SIGKILLed ten
// times with a batch cut off (its claim left behind, publishes in flight)
// under concurrent writes, then NATS stops and starts again with
// publishes in flight. After every kill the next relay looks up the cut
// off batch's rows in the stream (the claim check: its log line) and
// settles them with no duplicate PubAck, though it starts within the
// stream's 1 s duplicate window; nothing is lost, stored out of aggregate
// order or stored twice.
func TestPollFaultRelayKilledRepeatedly(t *testing.T) {
	env := suite.PollEnv(t, suite.NewEnv(t))
	w, stop := relaytest.Load(t, env)
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	const kills = 10
	var left []int64 // the claims the last kill left
	for hits, tries := 0, 1; hits < kills; tries++ {
		if tries > 2*kills {
			t.Fatalf("only %d of %d kills cut a batch off", hits, tries-1)
		}
		relay := suite.StartRelay(t, env, relaytest.PollArgs...)
		relay.WaitLog(relaytest.LogPolling, relaytest.FaultWait)
		requireClaimsSettled(t, env, relay, left)
		w.WaitTx(t, 5, relaytest.FaultWait)
		relaytest.InFlight(t, env, relay, 300+rng.Intn(1200))
		relay.Kill()
		if left = pollClaims(t, env); len(left) == 0 {
			// Between two batches: no publish in flight after all.
			t.Logf("kill %d landed between two batches: not counted", tries)
			continue
		}
		hits++
	}
	relay := suite.StartRelay(t, env, relaytest.PollArgs...)
	relay.WaitLog(relaytest.LogPolling, relaytest.FaultWait)
	requireClaimsSettled(t, env, relay, left)
	w.WaitTx(t, 10, relaytest.FaultWait)
	relaytest.InFlight(t, env, relay, 2000)
	env.NATS.Stop()
	time.Sleep(3 * time.Second) // the outage
	if err := env.NATS.Start(); err != nil {
		t.Fatal(err)
	}
	relaytest.WaitLogCount(t, relay, relaytest.LogOutageOver, 1, relaytest.FaultWait)
	w.WaitTx(t, 10, relaytest.FaultWait)
	stop()
	settlePolled(t, env, relay, w, 60, 0)
}

// logClaimed: a batch found rows claimed by one that did not commit.
const logClaimed = "rows claimed by a batch that did not commit"

// pollClaims returns the claims in the claims table (poll.ClaimsTable):
// right after a kill, those of the batch it cut off.
func pollClaims(t *testing.T, env *relaytest.Env) []int64 {
	t.Helper()
	rows, err := env.Pool.Query(context.Background(), `SELECT claim_id FROM outbox_relay_poll_claims ORDER BY claim_id`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// requireClaimsSettled waits until relay has settled the rows of the
// claims a killed relay left (a batch releases a claim's rows as it
// commits them), and requires that it ran the claim check for them and
// published none again: no duplicate PubAck.
func requireClaimsSettled(t *testing.T, env *relaytest.Env, relay *relaytest.Relay, claims []int64) {
	t.Helper()
	if len(claims) == 0 {
		return
	}
	deadline := time.Now().Add(relaytest.FaultWait)
	for remaining := claims; len(remaining) > 0; remaining = intersect(claims, pollClaims(t, env)) {
		if time.Now().After(deadline) || relay.Exited() {
			t.Fatalf("claims %v a killed relay left still held %s later: the next relay did not settle their rows (it ran the claim check %d times); its log's end:\n%s",
				remaining, relaytest.FaultWait, relay.CountLog(logClaimed), lastLines(relay.Logs(), 30))
		}
		time.Sleep(50 * time.Millisecond)
	}
	checks := relay.CountLog(logClaimed)
	if checks == 0 {
		t.Errorf("the relay settled the rows of the claims %v a killed relay left without looking for them in the stream: the claim check did not run", claims)
	}
	t.Logf("the next relay settled the claims %v the kill left, after %d claim checks", claims, checks)
	requireNoDuplicateAcks(t, relay)
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// intersect returns the elements of a that are in b.
func intersect(a, b []int64) []int64 {
	var out []int64
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// TestPollRefusesWhileSlotExists: a polling relay does not start on a
// table a WAL relay reads (it would publish everything again).
func TestPollRefusesWhileSlotExists(t *testing.T) {
	env := suite.PollEnv(t, suite.NewEnv(t))
	wal := suite.StartRelay(t, env)
	wal.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	poller := suite.StartRelay(t, env, relaytest.PollArgs...)
	if code := poller.Wait(relaytest.FaultWait); code != 1 {
		t.Fatalf("polling relay exited %d, want 1", code)
	}
	if !strings.Contains(poller.Logs(), "replication slot") || !strings.Contains(poller.Logs(), "docs/polling.md") {
		t.Errorf("the refusal does not say why and what to do:\n%s", poller.Logs())
	}
	wal.Drain(30 * time.Second)
}

// TestWALIgnoresPollBookkeeping: with the table set up for polling,
// the WAL relay publishes inserts only: updates of processed_at,
// attempts, retry_after and last_error reach no one.
func TestWALIgnoresPollBookkeeping(t *testing.T) {
	env := suite.PollEnv(t, suite.NewEnv(t))
	relay := suite.StartRelay(t, env)
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	env.Tx(relaytest.NewRow("order", "1", "created", `{}`), relaytest.NewRow("order", "1", "paid", `{}`))
	env.WaitStored(2, 30*time.Second)
	env.Exec(`UPDATE outbox_events SET processed_at = now(), attempts = attempts + 1, retry_after = now(), last_error = 'x'`)
	// Decoded after the updates, in WAL order: once it is stored, anything
	// the updates made the relay publish would be stored too.
	env.Tx(relaytest.NewRow("order", "1", "shipped", `{}`))
	env.WaitStored(3, 30*time.Second)
	env.WaitSlotCaughtUp(30 * time.Second)
	if n := env.CountStored(); n != 3 {
		t.Fatalf("stream holds %d messages, want 3: updates were published", n)
	}
	relay.Drain(30 * time.Second)
	env.Check()
}

// TestPollDeadLetterListVerifyRetry: in polling mode a row the stream
// refuses is tried --poll-max-attempts times, then dead-lettered exactly as
// in WAL mode: `dlq list` shows it with the reason, `verify` (which reads no
// slot) finds the table and the stream in agreement, and `dlq retry`
// publishes the row once it is fixed.
func TestPollDeadLetterListVerifyRetry(t *testing.T) {
	env := suite.PollEnv(t, suite.NewEnv(t))
	ctx := context.Background()
	if _, err := env.JS.CreateStream(ctx, jetstream.StreamConfig{Name: env.Stream, Subjects: []string{"outbox.>", env.DeadSubj},
		Storage: jetstream.FileStorage, MaxMsgSize: 2048, Duplicates: time.Second}); err != nil {
		t.Fatal(err)
	}
	relay := suite.StartRelay(t, env, append(relaytest.PollArgs, "--poll-max-attempts", "2", "--poll-backoff", "100ms")...)
	relay.WaitLog(relaytest.LogPolling, relaytest.FaultWait)
	tooBig := env.Tx(relaytest.NewRow("order", "1", "too.big", `{"blob": "`+strings.Repeat("x", 3000)+`"}`),
		relaytest.NewRow("order", "1", "next", `{}`))[0]
	for deadline := time.Now().Add(relaytest.FaultWait); relaytest.PendingRows(t, env) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("rows still pending; log:\n%s", relay.Logs())
		}
	}
	out, err := suite.Relay.RunCLI(t, "dlq", "list", "--pg-url", env.PGURL)
	if err != nil || !strings.Contains(out, tooBig) || !strings.Contains(out, "gave up after 2 attempts") {
		t.Fatalf("dlq list (%v):\n%s", err, out)
	}
	if out, err := suite.Relay.RunCLI(t, append([]string{"verify"}, env.ToolArgs()...)...); err != nil {
		t.Fatalf("verify in polling mode (%v):\n%s", err, out)
	}
	env.Exec(`UPDATE outbox_events SET payload = '{"fixed": true}' WHERE id = $1`, tooBig)
	if out, err := suite.Relay.RunCLI(t, append([]string{"dlq", "retry", "--id", tooBig}, env.ToolArgs()...)...); err != nil || !strings.Contains(out, "published") {
		t.Fatalf("dlq retry after fixing the row (%v):\n%s", err, out)
	}
	m := relaytest.LastOnSubjects(t, env, "outbox.>")
	if m.Header.Get(contract.HeaderMsgID) != tooBig || string(m.Data) != `{"fixed": true}` {
		t.Errorf("retried event: %q %q", m.Header.Get(contract.HeaderMsgID), m.Data)
	}
	relay.Drain(30 * time.Second)
}

// TestPollFaultPostgresCrash: Postgres is killed (immediate shutdown) under
// load with publishes in flight and restarted; the polling relay's batch
// fails, and the next one, after Postgres is back, finds the claim and
// does not publish again what the stream holds. A crash that lands
// between two batches (none cut off: no claim) is not counted and done
// again.
func TestPollFaultPostgresCrash(t *testing.T) {
	cluster, err := relaytest.StartCluster(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cluster.Close() })
	env := suite.PollEnv(t, relaytest.NewEnv(t, cluster))
	relay := suite.StartRelay(t, env, relaytest.PollArgs...)
	relay.WaitLog(relaytest.LogPolling, relaytest.FaultWait)
	w, stop := relaytest.Load(t, env)
	w.WaitTx(t, 30, relaytest.FaultWait)
	for crash := 1; ; crash++ {
		failed := len(pollFailures(relay))
		relaytest.InFlight(t, env, relay, 2000)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := cluster.Stop(ctx, "immediate"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second) // the outage
		if err := cluster.Start(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		relaytest.WaitLogCount(t, relay, logPollRecovered, crash, relaytest.FaultWait)
		failures := pollFailures(relay)
		if len(failures) <= failed {
			t.Fatalf("polling works again after crash %d, but no failure was logged; log:\n%s", crash, relay.Logs())
		}
		first := failures[failed] // the batch the crash hit
		if cutOff(first) {
			t.Logf("crash %d cut a batch off: %s", crash, first)
			break
		}
		if crash == 3 {
			t.Fatalf("3 crashes, none landed in a batch that had claimed and published its rows; the last failed with: %s", first)
		}
		t.Logf("crash %d landed between two batches (%s): not counted", crash, first)
	}
	w.WaitTx(t, 20, relaytest.FaultWait)
	stop()
	settlePolled(t, env, relay, w, 50, 0)
	requireClaimFound(t, relay)
	if left := pollClaims(t, env); len(left) > 0 {
		t.Errorf("claims %v left after every row was processed", left)
	}
}

// pollFailures returns the errors of the relay's "poll failed" lines, in
// order: the first after a fault is the batch it hit (later ones are rate
// limited until polling works again).
func pollFailures(relay *relaytest.Relay) []string {
	var out []string
	for _, line := range strings.Split(relay.Logs(), "\n") {
		var entry struct{ Message, Error string }
		if json.Unmarshal([]byte(line), &entry) == nil && strings.HasPrefix(entry.Message, logPollFailed) {
			out = append(out, entry.Error)
		}
	}
	return out
}

// cutOff reports whether a batch failed as it settled (poll/batch.go:
// settle), after it had claimed and published its rows: it leaves its
// claim behind. A batch that fails earlier has no claim.
func cutOff(failure string) bool {
	for _, step := range []string{"mark ", "count a failed attempt", "release the claims", "commit a polling batch"} {
		if strings.HasPrefix(failure, step) {
			return true
		}
	}
	return false
}

// requireClaimFound: the crash cut off exactly one batch (one runs at a
// time), whose claim was committed before its first publish and survived
// the crash, and whose rows were all published: NATS, untouched by the
// crash, stored them. After the restart the claim check must have run,
// each time finding that one claim, and found rows of it in the stream.
// It runs once when the first batch takes all the claim's rows (the same
// query over the same oldest pending rows, as a rule), more often when
// the claim's rows are split over batches (an aggregate's share of a batch
// changed).
func requireClaimFound(t *testing.T, relay *relaytest.Relay) {
	t.Helper()
	var checks []map[string]any
	stored := 0.0
	for _, line := range strings.Split(relay.Logs(), "\n") {
		var entry map[string]any
		if json.Unmarshal([]byte(line), &entry) != nil {
			continue
		}
		if msg, _ := entry["message"].(string); !strings.HasPrefix(msg, logClaimed) {
			continue
		}
		checks = append(checks, entry)
		n, _ := entry["stored_already"].(float64)
		stored += n
		if claims, _ := entry["claims"].(float64); claims != 1 {
			t.Errorf("a claim check after the crash found %v claims, want the one of the batch cut off: %v", entry["claims"], entry)
		}
	}
	if len(checks) == 0 || stored < 1 {
		t.Errorf("%d claim checks after the crash, finding %v rows in the stream; want at least one, finding the rows the cut off batch published", len(checks), stored)
	}
	t.Logf("the claim checks after the crash: %v", checks)
}

// TestPollFaultNATSKilled: the NATS process (sync always) is SIGKILLed
// twice under load with publishes in flight and restarted from its store;
// the polling relay's batch waits through the outage and stores nothing
// twice.
func TestPollFaultNATSKilled(t *testing.T) {
	env := suite.PollEnv(t, suite.NewEnv(t))
	nats := relaytest.StartNATSProcess(t, suite.NATS, true)
	env.UseNATS(nats.URL())
	relay := suite.StartRelay(t, env, relaytest.PollArgs...)
	relay.WaitLog(relaytest.LogPolling, relaytest.FaultWait)
	w, stop := relaytest.Load(t, env)
	relaytest.KillNATSTwice(t, env, relay, w, nats)
	stop()
	settlePolled(t, env, relay, w, 80, 0)
}
