package poll

import (
	"context"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// settlePolled ends a polling fault case with the load stopped: every row
// processed and in the stream, SIGTERM drains the relay (exit 0), and the
// check holds (up to maxDup events stored twice tolerated).
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
	dups, err := relay.Metric(relaytest.DuplicateAcksMetric)
	if err != nil {
		t.Fatal(err)
	}
	relay.Drain(30 * time.Second)
	res := env.CheckWith(relaytest.Expect{Workload: w, Polled: true, MinTx: minTx, StoredDuplicates: maxDup})
	t.Logf("check: %s; the last relay's duplicate PubAcks: %v", res, dups)
	return res
}

// TestPollFaultRelayKilledRepeatedly: the polling relay is SIGKILLed ten
// times with publishes in flight under concurrent writes, then NATS stops
// and starts again with publishes in flight. Nothing is lost or stored out
// of aggregate order, and nothing is stored twice although the stream's
// duplicate window is 1 s: rows a killed batch claimed are looked up in
// the stream before they are published again.
func TestPollFaultRelayKilledRepeatedly(t *testing.T) {
	env := suite.PollEnv(t, suite.NewEnv(t))
	w, stop := relaytest.Load(t, env)
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	const kills = 10
	var relays []*relaytest.Relay
	for i := 0; i < kills; i++ {
		relay := suite.StartRelay(t, env, relaytest.PollArgs...)
		relays = append(relays, relay)
		relay.WaitLog(relaytest.LogPolling, relaytest.FaultWait)
		w.WaitTx(t, 5, relaytest.FaultWait)
		relaytest.InFlight(t, env, relay, 300+rng.Intn(1200))
		relay.Kill()
	}
	relay := suite.StartRelay(t, env, relaytest.PollArgs...)
	relays = append(relays, relay)
	relay.WaitLog(relaytest.LogPolling, relaytest.FaultWait)
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
	recovered := 0
	for _, r := range relays[1:] {
		if r.CountLog(logClaimed) > 0 {
			recovered++
		}
	}
	t.Logf("after %d of %d kills the next relay found rows a killed batch had claimed", recovered, kills)
	if recovered == 0 {
		t.Errorf("no relay found rows a killed batch had claimed: the path this case is about did not run")
	}
}

// logClaimed: a batch found rows claimed by one that did not commit.
const logClaimed = "rows claimed by a batch that did not commit"

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
// does not publish again what the stream holds.
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
	relaytest.InFlight(t, env, relay, 2000)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cluster.Stop(ctx, "immediate"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the outage
	if err := cluster.Start(ctx); err != nil {
		t.Fatal(err)
	}
	w.WaitTx(t, 20, relaytest.FaultWait)
	stop()
	relaytest.RequireLog(t, relay, "poll failed", 1)
	settlePolled(t, env, relay, w, 50, 0)
	t.Logf("the relay found rows a failed batch had claimed %d times", relay.CountLog(logClaimed))
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
