package faults

import (
	"testing"
	"time"
)

// TestIdleOutboxBusyTables: while the outbox is idle and other tables are
// busy, the slot still advances: after 200 MB written elsewhere, its lag
// is under 16 MB within one status interval.
func TestIdleOutboxBusyTables(t *testing.T) {
	t.Parallel()
	env := suite.NewEnv(t)
	relay := suite.StartRelay(t, env, "--status-interval", "3s")
	relay.WaitLog("streaming from the slot", 30*time.Second)
	env.Exec(`CREATE TABLE busy (id BIGSERIAL PRIMARY KEY, body TEXT)`)
	for i := 0; i < 20; i++ { // 20 × ~10 MB
		env.Exec(`INSERT INTO busy (body) SELECT repeat('x', 1000) FROM generate_series(1, 10000)`)
	}
	// Within one status interval (and a margin) of the last write.
	deadline := time.Now().Add(3*time.Second + 500*time.Millisecond)
	for {
		lag := env.SlotInfo().LagBytes
		if lag < 16<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot lag %d bytes (%.1f MB) one status interval after writing to another table", lag, float64(lag)/(1<<20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
