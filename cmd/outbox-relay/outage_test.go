package main

import (
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// TestIdleOutboxBusyTables: while the outbox is idle and other tables are
// busy, the slot still advances: after 200 MB written elsewhere, its lag
// is under 16 MB within one status interval.
func TestIdleOutboxBusyTables(t *testing.T) {
	t.Parallel()
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
