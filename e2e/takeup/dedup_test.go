package takeup

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// TestNoDuplicatesAfterLongDowntime: the relay is killed right after
// JetStream acknowledged a batch and before it confirmed the batch to
// Postgres, and restarts after the stream's 1 s dedup window has passed.
// Postgres replays the batch; the relay skips exactly what the stream holds.
func TestNoDuplicatesAfterLongDowntime(t *testing.T) {
	env := suite.NewEnv(t)
	var relay *relaytest.Relay
	var killed time.Time
	for attempt := 0; ; attempt++ {
		relay = suite.StartRelay(t, env, "--status-interval", "30s")
		relay.WaitLog(relaytest.LogStreaming, 30*time.Second)
		rows := make([]relaytest.Row, 300)
		for i := range rows {
			rows[i] = relaytest.NewRow("order", "a"+string(rune('0'+i%7)), "created", `{"i": 1}`)
		}
		ids := env.Tx(rows...)
		env.Tx(relaytest.NewRow("order", "x", "created", `{}`)) // a second transaction
		want := uint64(len(env.TableIDs()))
		for deadline := time.Now().Add(30 * time.Second); env.CountStored() < want; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("stream holds %d messages after 30s, want %d", env.CountStored(), want)
			}
		}
		relay.Kill()
		killed = time.Now()
		// The precondition: the slot still has the last transaction to replay.
		last := relaytest.StoredByID(t, env)[ids[len(ids)-1]]
		lsn, _ := pglogrepl.ParseLSN(last.Header.Get(contract.HeaderCommitLSN))
		if env.SlotInfo().ConfirmedFlush <= lsn {
			break
		}
		if attempt == 5 {
			t.Fatal("could not kill the relay between PubAck and status update in 6 attempts")
		}
	}
	// The fault: the restart comes after the dedup window, so JetStream
	// would store a republished event again.
	time.Sleep(time.Until(killed.Add(2 * env.DuplicateWindow)))
	relay = suite.StartRelay(t, env)
	relay.WaitLog(relaytest.LogStreaming, 30*time.Second)
	relaytest.RequireLog(t, relay, relaytest.LogSkipStored, 1)
	env.Tx(relaytest.NewRow("order", "y", "after.restart", `{}`))
	env.WaitRows(30 * time.Second)
	env.WaitSlotCaughtUp(relaytest.FaultWait)
	if n, err := relay.Metric(relaytest.DuplicateAcksMetric); err != nil || n != 0 {
		t.Errorf("%s = %v (%v) after the restart", relaytest.DuplicateAcksMetric, n, err)
	}
	relay.Drain(30 * time.Second)
	rep := env.Check()
	t.Logf("%d events checked, %d messages, %d duplicated", rep.Rows, rep.Messages, len(rep.Duplicates))
}

// TestNoDuplicatesAfterNATSOutage: NATS stops for 5 s under load, with
// publishes in flight, longer than the stream's 1 s dedup window. Events
// whose PubAck was lost are found in the stream, not republished. The
// outage is repeated until that path has run (twice at least, at most
// five times).
func TestNoDuplicatesAfterNATSOutage(t *testing.T) {
	t.Parallel()
	env := suite.NewEnv(t)
	relay := suite.StartRelay(t, env, "--ack-timeout", "1s")
	relay.WaitLog(relaytest.LogStreaming, 30*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &relaytest.Workload{Writers: 3, MaxTxRows: 5, Aggregates: 20, RollbackEvery: 6, Pace: 2 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, env, 0) }()
	const found = "found events in the stream whose PubAck was lost"
	rounds := 0
	for rounds < 2 || (rounds < 5 && relay.CountLog(found) == 0) {
		rounds++
		w.WaitTx(t, 50, relaytest.FaultWait)
		relaytest.InFlight(t, env, relay, 3000)
		env.NATS.Stop()
		time.Sleep(5 * time.Second) // the outage, longer than the dedup window
		if err := env.NATS.Start(); err != nil {
			t.Fatal(err)
		}
		relaytest.WaitLogCount(t, relay, relaytest.LogOutageOver, rounds, relaytest.FaultWait)
	}
	w.WaitTx(t, 50, relaytest.FaultWait)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	res := relaytest.Settle(t, env, relay, w, relaytest.Expect{MinTx: 200})
	t.Logf("%d outages; lost PubAcks found in the stream after %d of them; %d ids stored twice", rounds, relay.CountLog(found), len(res.Duplicates))
	relaytest.RequireLog(t, relay, found, 1)
}
