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

// TestNATSOutageHoldsTheSlot: with NATS stopped for 30 s the confirmed
// position does not move past unacknowledged events while inserts go on,
// the relay keeps answering Postgres (wal_sender_timeout is 5 s here) so
// its walsender survives, and when NATS is back every event arrives and
// the slot catches up.
func TestNATSOutageHoldsTheSlot(t *testing.T) {
	env := newEnv(t)
	relay := startRelay(t, env, "--ack-timeout", "1s")
	relay.WaitLog("streaming from the slot", 30*time.Second)
	env.Tx(relaytest.NewRow("order", "1", "created", `{}`))
	env.WaitStored(1, 10*time.Second)
	waitCaughtUp(t, env, 15*time.Second)
	pid := walsenderPID(t, env)

	env.NATS.Stop()
	first := env.Tx(relaytest.NewRow("order", "2", "during.outage", `{}`))[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := &relaytest.Workload{Writers: 2, MaxTxRows: 3, Aggregates: 10, Pace: 20 * time.Millisecond}
	go func() { _ = w.Run(ctx, env, 0) }()
	var highest pglogrepl.LSN
	for ctx.Err() == nil {
		highest = max(highest, env.SlotInfo().ConfirmedFlush)
		time.Sleep(500 * time.Millisecond)
	}
	if got := walsenderPID(t, env); got != pid {
		t.Fatalf("walsender changed from pid %d to %d: Postgres dropped the relay while it waited for NATS", pid, got)
	}
	if strings.Contains(env.ClusterLog(), "terminating walsender process due to replication timeout") {
		t.Fatal("Postgres timed out the relay's walsender while NATS was down")
	}

	if err := env.NATS.Start(); err != nil {
		t.Fatal(err)
	}
	env.WaitRows(90 * time.Second)
	env.Check()
	// The first event written during the outage committed at this LSN:
	// confirming beyond it while it was unacknowledged would have told
	// Postgres it could be skipped.
	commit, err := pglogrepl.ParseLSN(storedByID(t, env)[first].Header.Get(sink.HeaderCommitLSN))
	if err != nil {
		t.Fatal(err)
	}
	if highest > commit {
		t.Fatalf("during the outage the slot confirmed %s, past the unacknowledged transaction committed at %s", highest, commit)
	}
	waitCaughtUp(t, env, 30*time.Second)
	if relay.Exited() {
		t.Fatal("relay exited during the outage")
	}
	if n := strings.Count(relay.Logs(), "still not accepting"); n > 8 {
		t.Errorf("%d retry log lines in a 30 s outage: the log floods", n)
	}
}

// TestKillAndRestart: the relay is killed with SIGKILL at arbitrary moments
// under load; after each restart nothing is missing, and the stream's
// dedup removes what was published twice.
func TestKillAndRestart(t *testing.T) {
	env := newEnv(t)
	first := startRelay(t, env)
	first.WaitLog("streaming from the slot", 30*time.Second)
	first.Kill()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &relaytest.Workload{Writers: 3, MaxTxRows: 8, Aggregates: 15, RollbackEvery: 5, Pace: 5 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, env, 0) }()
	for i := 0; i < 5; i++ {
		relay := startRelay(t, env)
		time.Sleep(time.Duration(300+i*170) * time.Millisecond)
		relay.Kill()
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	relay := startRelay(t, env)
	relay.WaitLog("streaming from the slot", 30*time.Second)
	env.WaitRows(time.Minute)
	env.Check()
}

// TestIdleOutboxBusyTables: while the outbox is idle and other tables are
// busy, the slot still advances: after 200 MB written elsewhere, its lag
// is under 16 MB within one status interval.
func TestIdleOutboxBusyTables(t *testing.T) {
	env := newEnv(t)
	relay := startRelay(t, env, "--status-interval", "3s")
	relay.WaitLog("streaming from the slot", 30*time.Second)
	env.Exec(`CREATE TABLE busy (id BIGSERIAL PRIMARY KEY, body TEXT)`)
	for i := 0; i < 20; i++ { // 20 × ~10 MB
		env.Exec(`INSERT INTO busy (body) SELECT repeat('x', 1000) FROM generate_series(1, 10000)`)
	}
	time.Sleep(3*time.Second + 500*time.Millisecond)
	if lag := env.SlotInfo().LagBytes; lag >= 16<<20 {
		t.Fatalf("slot lag %d bytes (%.1f MB) one status interval after writing to another table", lag, float64(lag)/(1<<20))
	}
}

// waitCaughtUp waits until the slot's lag is under 1 MiB: the relay
// confirms keepalive-only progress in steps of that size (see
// checkpoint.Ledger), so an idle relay trails by less than that.
func waitCaughtUp(t *testing.T, env *relaytest.Env, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		lag := env.SlotInfo().LagBytes
		if lag < 1<<20 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot lag still %d bytes after %s", lag, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func walsenderPID(t *testing.T, env *relaytest.Env) int32 {
	t.Helper()
	info := env.SlotInfo()
	if !info.Active {
		t.Fatal("slot is not active")
	}
	return info.ActivePID
}
