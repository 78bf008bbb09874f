package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/sink"
)

// TestNoDuplicatesAfterLongDowntime: the relay is killed right after
// JetStream acknowledged a batch and before it confirmed the batch to
// Postgres, and restarts after the stream's 1 s dedup window has passed.
// Postgres replays the batch; the relay skips exactly what the stream holds.
func TestNoDuplicatesAfterLongDowntime(t *testing.T) {
	env := newEnv(t)
	var relay *relaytest.Relay
	for attempt := 0; ; attempt++ {
		relay = startRelay(t, env, "--duplicate-window", "1s", "--status-interval", "30s")
		relay.WaitLog("streaming from the slot", 30*time.Second)
		rows := make([]relaytest.Row, 300)
		for i := range rows {
			rows[i] = relaytest.NewRow("order", "a"+string(rune('0'+i%7)), "created", `{"i": 1}`)
		}
		ids := env.Tx(rows...)
		env.Tx(relaytest.NewRow("order", "x", "created", `{}`)) // a second transaction
		want := uint64(len(env.TableIDs()))
		for env.CountStored() < want {
			time.Sleep(time.Millisecond)
		}
		relay.Kill()
		// The precondition: the slot still has the last transaction to replay.
		last := storedByID(t, env)[ids[len(ids)-1]]
		lsn, _ := pglogrepl.ParseLSN(last.Header.Get(sink.HeaderCommitLSN))
		if env.SlotInfo().ConfirmedFlush <= lsn {
			break
		}
		if attempt == 5 {
			t.Fatal("could not kill the relay between PubAck and status update in 6 attempts")
		}
	}
	time.Sleep(2 * time.Second) // longer than the dedup window
	relay = startRelay(t, env, "--duplicate-window", "1s")
	relay.WaitLog("streaming from the slot", 30*time.Second)
	env.Tx(relaytest.NewRow("order", "y", "after.restart", `{}`))
	env.WaitRows(30 * time.Second)
	time.Sleep(500 * time.Millisecond)
	rep := env.Check()
	if len(rep.Duplicates) > 0 {
		t.Fatalf("%d ids stored twice after a restart past the dedup window", len(rep.Duplicates))
	}
	if !strings.Contains(relay.Logs(), "skipping exactly those") {
		t.Error("the restarted relay did not report skipping what the stream held")
	}
}

// TestNoDuplicatesAfterNATSOutage: NATS stops for 5 s under load, longer
// than the stream's 1 s dedup window. Events whose PubAck was lost are
// found in the stream, not republished.
func TestNoDuplicatesAfterNATSOutage(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	relay := startRelay(t, env, "--duplicate-window", "1s", "--ack-timeout", "1s")
	relay.WaitLog("streaming from the slot", 30*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &relaytest.Workload{Writers: 3, MaxTxRows: 5, Aggregates: 20, RollbackEvery: 6, Pace: 2 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, env, 0) }()
	for round := 0; round < 2; round++ {
		time.Sleep(time.Second)
		env.NATS.Stop()
		time.Sleep(5 * time.Second)
		if err := env.NATS.Start(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	env.WaitRows(time.Minute)
	time.Sleep(500 * time.Millisecond)
	rep := env.Check()
	if len(rep.Duplicates) > 0 {
		t.Fatalf("%d ids stored twice after NATS outages longer than the dedup window", len(rep.Duplicates))
	}
	t.Logf("%d events, %d rolled back; relay log mentions lost PubAcks found in the stream: %v",
		rep.Rows, len(w.Aborted()), strings.Contains(relay.Logs(), "PubAck was lost"))
}
