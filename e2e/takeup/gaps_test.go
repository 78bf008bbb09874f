package takeup

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// logBootstrapped is the relay's line after it created its slot and
// published, from the slot's snapshot, the rows the stream lacked.
const logBootstrapped = "created the replication slot; published the rows the stream needed from the table"

// requirePublishedFromTable fails the test unless the relay published at
// least n rows from the table when it created its slot (a first start or
// a repair).
func requirePublishedFromTable(t *testing.T, r *relaytest.Relay, n int) {
	t.Helper()
	if got, ok := relaytest.LogNumber(r, logBootstrapped, "published"); !ok || got < float64(n) {
		t.Errorf("the relay published %v rows from the table at its slot's creation (logged: %v), want at least %d", got, ok, n)
	}
}

// finish ends a case once its writes are done: every row stored, the
// slot caught up, no duplicate acknowledged, the relay drained with
// SIGTERM, then the check.
func finish(t *testing.T, env *relaytest.Env, r *relaytest.Relay, x relaytest.Expect) relaytest.Result {
	t.Helper()
	env.WaitRows(time.Minute)
	env.WaitSlotCaughtUp(relaytest.FaultWait)
	if n, err := r.Metric(relaytest.DuplicateAcksMetric); err != nil || n != 0 {
		t.Errorf("%s = %v (%v)", relaytest.DuplicateAcksMetric, n, err)
	}
	r.Drain(30 * time.Second)
	res := env.CheckWith(x)
	t.Logf("check: %s", res)
	return res
}

// expectRefusal starts a relay that must stop at once, non-zero, saying
// what happened and how to repair.
func expectRefusal(t *testing.T, env *relaytest.Env, want ...string) {
	t.Helper()
	r := suite.StartRelay(t, env)
	if code := r.Wait(60 * time.Second); code == 0 {
		t.Fatal("relay went on despite a gap")
	}
	for _, w := range append(want, "--recreate-slot") {
		if !strings.Contains(r.Logs(), w) {
			t.Errorf("refusal does not mention %q:\n%s", w, r.Logs())
		}
	}
}

// repair runs the documented way back: one start with --recreate-slot,
// which publishes what the stream lacks, then streams on.
func repair(t *testing.T, env *relaytest.Env) *relaytest.Relay {
	t.Helper()
	r := suite.StartRelay(t, env, "--recreate-slot")
	r.WaitLog("streaming from the slot", time.Minute)
	return r
}

// slotDroppedAfterOneEvent runs the relay until it published one event,
// stops it, and drops its slot.
func slotDroppedAfterOneEvent(t *testing.T) *relaytest.Env {
	return slotDroppedAfter(t, relaytest.StopRelay)
}

// slotDroppedAfter runs the relay until it published one event, ends it
// with stop, and drops its slot once no walsender holds it.
func slotDroppedAfter(t *testing.T, stop func(testing.TB, *relaytest.Relay)) *relaytest.Env {
	env := suite.NewEnv(t)
	r := suite.StartRelay(t, env)
	r.WaitLog("streaming from the slot", 30*time.Second)
	env.Tx(relaytest.NewRow("order", "1", "before", `{}`))
	env.WaitStored(1, 10*time.Second)
	stop(t, r)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := env.Pool.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, env.Slot)
		if err == nil {
			return env
		}
		if time.Now().After(deadline) {
			t.Fatalf("drop the slot: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // a killed relay's walsender may hold it a moment
	}
}

// TestGapSlotDropped: the slot is dropped while the relay is stopped and
// events are written meanwhile. The relay refuses to go on; the repair
// publishes the events written in the gap.
func TestGapSlotDropped(t *testing.T) {
	env := slotDroppedAfterOneEvent(t)
	gap := env.Tx(relaytest.NewRow("order", "1", "in.the.gap", `{}`), relaytest.NewRow("order", "2", "in.the.gap", `{}`))
	expectRefusal(t, env, "was dropped")
	r := repair(t, env)
	env.Tx(relaytest.NewRow("order", "1", "after", `{}`))
	finish(t, env, r, relaytest.Expect{})
	requirePublishedFromTable(t, r, 2)
	if stored := relaytest.StoredByID(t, env); stored[gap[0]] == nil || stored[gap[1]] == nil {
		t.Fatal("the events written in the gap were not published by the repair")
	}
	if !strings.Contains(r.Logs(), `"missing":2`) {
		t.Error("the repair did not report the 2 missing rows")
	}
}

// TestGapSlotRecreated: someone drops the slot and creates another under
// the same name: it starts at "now", after events the old one still held.
// After a clean stop the stop's record names the gap; after a SIGKILL
// only the position the relay last confirmed bounds it (beyond the slack).
func TestGapSlotRecreated(t *testing.T) {
	for _, c := range []struct {
		name, refusal string
		stop          func(testing.TB, *relaytest.Relay)
	}{
		{"after a clean stop", "beyond where this relay stopped", relaytest.StopRelay},
		{"after a SIGKILL", "beyond anything this relay confirmed", func(_ testing.TB, r *relaytest.Relay) { r.Kill() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := slotDroppedAfter(t, c.stop)
			env.Tx(relaytest.NewRow("order", "1", "lost.without.the.check", `{}`))
			// Other work moves the WAL on (the check needs more than
			// checkpoint.Slack of WAL between the relay's last record and the new slot).
			env.Exec(`CREATE TABLE churn AS SELECT md5(random()::text) AS b FROM generate_series(1, 20000)`)
			env.Exec(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, env.Slot)
			expectRefusal(t, env, c.refusal)
			r := repair(t, env)
			finish(t, env, r, relaytest.Expect{})
			requirePublishedFromTable(t, r, 1)
		})
	}
}

// TestGapSlotInvalidated: with max_slot_wal_keep_size, a relay stopped long
// enough loses its slot (wal_status lost). The relay refuses and names the
// repair, which publishes what the lost WAL held.
func TestGapSlotInvalidated(t *testing.T) {
	cluster := relaytest.PrivateCluster(t, map[string]string{
		"max_slot_wal_keep_size": "'2MB'", "max_wal_size": "'4MB'", "min_wal_size": "'2MB'",
	}, "--wal-segsize=1")
	env := relaytest.NewEnv(t, cluster)
	r := suite.StartRelay(t, env)
	r.WaitLog("streaming from the slot", 30*time.Second)
	env.Tx(relaytest.NewRow("order", "1", "before", `{}`))
	env.WaitStored(1, 10*time.Second)
	relaytest.StopRelay(t, r)
	lost := env.Tx(relaytest.NewRow("order", "1", "in.lost.wal", `{}`))
	env.Exec(`CREATE TABLE churn (b TEXT)`)
	deadline := time.Now().Add(time.Minute)
	for env.SlotInfo().WALStatus != "lost" {
		if time.Now().After(deadline) {
			t.Fatalf("slot not invalidated: wal_status %q", env.SlotInfo().WALStatus)
		}
		env.Exec(`INSERT INTO churn SELECT repeat('x', 1000) FROM generate_series(1, 1000)`)
		env.Exec(`SELECT pg_switch_wal()`)
		env.Exec(`CHECKPOINT`)
	}
	expectRefusal(t, env, "invalidated")
	r = repair(t, env)
	finish(t, env, r, relaytest.Expect{})
	requirePublishedFromTable(t, r, 1)
	if relaytest.StoredByID(t, env)[lost[0]] == nil {
		t.Fatal("the event in the invalidated slot's WAL was not republished")
	}
}

// TestGapPublicationChanged: the outbox table leaves the publication, or
// the publication is dropped, while the relay runs: Postgres would decode
// nothing more for the table. The relay stops instead of confirming past
// the inserts it can no longer see.
func TestGapPublicationChanged(t *testing.T) {
	for name, ddl := range map[string]string{
		"table removed": `ALTER PUBLICATION outbox_pub DROP TABLE outbox_events`,
		"dropped":       `DROP PUBLICATION outbox_pub`,
	} {
		t.Run(name, func(t *testing.T) {
			env := suite.NewEnv(t)
			r := suite.StartRelay(t, env)
			r.WaitLog("streaming from the slot", 30*time.Second)
			env.Tx(relaytest.NewRow("order", "1", "before", `{}`))
			env.WaitStored(1, 10*time.Second)
			env.Exec(ddl)
			// Everything after this point was written without the table
			// in the publication: the slot must never be confirmed past it.
			var changedAt pglogrepl.LSN
			if err := env.Pool.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&changedAt); err != nil {
				t.Fatal(err)
			}
			env.Tx(relaytest.NewRow("order", "1", "unseen", `{}`))
			if code := r.Wait(30 * time.Second); code == 0 {
				t.Fatal("relay kept going after its publication changed")
			}
			if !strings.Contains(r.Logs(), "--recreate-slot") {
				t.Errorf("the relay does not say how to repair:\n%s", r.Logs())
			}
			if after := env.SlotInfo().ConfirmedFlush; after >= changedAt {
				t.Errorf("slot confirmed to %s, past the publication change at %s", after, changedAt)
			}
		})
	}
}

// TestSwitchFromPolling: a polling relay leaves unprocessed rows; the WAL
// relay starts while writers keep writing. Rows committed before the
// slot's snapshot are published from the table, rows after it from the
// WAL: none missing, none twice.
func TestSwitchFromPolling(t *testing.T) {
	env := suite.NewEnv(t)
	for i := 0; i < 20; i++ {
		rows := make([]relaytest.Row, 50)
		for j := range rows {
			rows[j] = relaytest.NewRow("legacy", "l", "pending", `{}`)
		}
		env.Tx(rows...)
	}
	env.Exec(`UPDATE outbox_events SET processed_at = now() WHERE ctid IN (SELECT ctid FROM outbox_events LIMIT 100)`)
	processed := 100
	w, stop := relaytest.Load(t, env)
	w.WaitTx(t, 10, relaytest.FaultWait) // the writers are busy when the relay starts
	r := suite.StartRelay(t, env)
	r.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	w.WaitTx(t, 20, relaytest.FaultWait)
	stop()
	// The rows a polling relay already processed are not published again.
	var pending int
	if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_events WHERE processed_at IS NULL`).Scan(&pending); err != nil {
		t.Fatal(err)
	}
	env.WaitStored(pending, 2*time.Minute)
	env.Exec(`DELETE FROM outbox_events WHERE processed_at IS NOT NULL`)
	relaytest.Settle(t, env, r, w, relaytest.Expect{MinTx: 30})
	if n := env.CountStored(); int(n) != pending {
		t.Errorf("stream holds %d messages, want the %d unprocessed rows (the %d processed ones excluded)", n, pending, processed)
	}
	// The legacy rows, and what the writers committed before the slot's
	// snapshot, came from the table.
	requirePublishedFromTable(t, r, 20*50-processed)
}

// TestVerifyCommand: verify passes on a healthy stream, reports an event
// the broker lost (and exits 1), and --republish puts it back.
func TestVerifyCommand(t *testing.T) {
	env := suite.NewEnv(t)
	// Long enough for two CLI runs (verify, then verify --republish) on a
	// loaded machine to fall inside it, short enough to wait out.
	const window = 20 * time.Second
	r := suite.StartRelay(t, env, "--duplicate-window", window.String())
	r.WaitLog("streaming from the slot", 30*time.Second)
	ids := env.Tx(relaytest.NewRow("order", "1", "a", `{}`), relaytest.NewRow("order", "1", "b", `{}`), relaytest.NewRow("order", "2", "c", `{}`))
	// created_at comes from Postgres's clock (or the application), the
	// stream's stored times from NATS's: a row "created" after the time
	// it was stored must still be found by verify --since.
	env.Exec(`INSERT INTO ` + env.Table.Quoted() + ` (aggregate_type, aggregate_id, event_type, payload, created_at)
		VALUES ('order', '3', 'ahead', '{}', now() + interval '10 minutes')`)
	env.WaitStored(4, 10*time.Second)
	args := append([]string{"verify"}, env.ToolArgs()...)
	if out, err := suite.Relay.RunCLI(t, args...); err != nil || !strings.Contains(out, "OK:") {
		t.Fatalf("verify on a healthy stream (%v):\n%s", err, out)
	}
	since := time.Now().Add(5 * time.Minute).UTC().Format(time.RFC3339)
	out, err := suite.Relay.RunCLI(t, append(args, "--since", since, "--json")...)
	var rep struct {
		Rows    int      `json:"rows"`
		Missing []string `json:"missing"`
	}
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil || rep.Rows != 1 || len(rep.Missing) != 0 {
		t.Fatalf("verify --since %s --json, for a row created after it was stored (%v):\n%s", since, err, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := env.StreamHandle(time.Second).DeleteMsg(ctx, relaytest.StoredByID(t, env)[ids[1]].Sequence); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	out, err = suite.Relay.RunCLI(t, args...)
	if err == nil || !strings.Contains(out, "missing:          1 "+ids[1]) {
		t.Fatalf("verify after the broker lost an event (%v):\n%s", err, out)
	}
	// Within the dedup window JetStream drops the republished message as a
	// duplicate of the deleted one: verify must say so, and fail.
	out, err = suite.Relay.RunCLI(t, append(args, "--republish")...)
	if took := time.Since(deleted); took >= window {
		t.Fatalf("verify --republish ended %s after the event was deleted, past the %s duplicate window: the machine is too slow for this check", took.Round(time.Millisecond), window)
	}
	if err == nil || !strings.Contains(out, "still missing after republishing") {
		t.Fatalf("verify --republish within the duplicate window (%v):\n%s", err, out)
	}
	time.Sleep(time.Until(deleted.Add(window + 500*time.Millisecond)))
	if out, err := suite.Relay.RunCLI(t, append(args, "--republish")...); err != nil || !strings.Contains(out, "OK:") {
		t.Fatalf("verify --republish (%v):\n%s", err, out)
	}
	// The republished event lands after later ones: outside commit order.
	env.CheckWith(relaytest.Expect{Republished: []string{ids[1]}})
	stored := relaytest.StoredByID(t, env)
	relaytest.RequireSameSource(t, stored[ids[0]], stored[ids[1]])
}
