package takeup

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// TestSeveralTablesNoDuplicatesAfterLongDowntime: a relay of two tables
// whose ids collide (one transaction writes ids 1-150 into each) is
// killed after JetStream acknowledged the transaction and before the
// relay confirmed it, and restarts after the stream's 1 s dedup window.
// Postgres replays the transaction; the relay skips exactly the events
// the stream holds, by their position and qualified id, so none is
// stored twice and none is taken for its twin of the other table.
func TestSeveralTablesNoDuplicatesAfterLongDowntime(t *testing.T) {
	env := suite.NewEnv(t)
	a := contract.Table{Schema: "public", Name: "a_events"}
	b := contract.Table{Schema: "shop", Name: "b_events"}
	suite.UseTables(t, env, []contract.Table{a, b})
	var relay *relaytest.Relay
	var killed time.Time
	for attempt := 0; ; attempt++ {
		relay = suite.StartRelay(t, env, "--status-interval", "30s")
		relay.WaitLog(relaytest.LogStreaming, 30*time.Second)
		rows := make([]relaytest.TableRow, 300)
		for i := range rows {
			table := a
			if i%2 == 1 {
				table = b
			}
			rows[i] = relaytest.In(table, relaytest.NewRow("order", "a"+string(rune('0'+i%7)), "created", `{"i": 1}`))
		}
		ids := env.TxIn(rows...)
		env.TxIn(relaytest.In(b, relaytest.NewRow("order", "x", "created", `{}`))) // a second transaction
		want := uint64(env.CountRows())
		relaytest.WaitFor(t, 30*time.Second, "every row stored", func() bool { return env.CountStored() >= want })
		relay.Kill()
		killed = time.Now()
		// The precondition: the slot still has the big transaction to replay.
		last := relaytest.StoredByID(t, env)[ids[len(ids)-1]]
		if last == nil {
			t.Fatalf("the stream lacks %s", ids[len(ids)-1])
		}
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
	env.TxIn(relaytest.In(a, relaytest.NewRow("order", "y", "after.restart", `{}`)))
	want := uint64(env.CountRows())
	relaytest.WaitFor(t, 30*time.Second, "every row stored", func() bool { return env.CountStored() >= want })
	env.WaitSlotCaughtUp(relaytest.FaultWait)
	if n, err := relay.Metric(relaytest.DuplicateAcksMetric); err != nil || n != 0 {
		t.Errorf("%s = %v (%v) after the restart", relaytest.DuplicateAcksMetric, n, err)
	}
	relay.Drain(30 * time.Second)
	rep := env.CheckTables()
	t.Logf("%d events of two tables checked, %d messages", rep.Rows, rep.Messages)
}

// TestAddingATable: a relay of one table, stopped, is started with a
// second table. The publication it recorded changed: it stops with the
// gap and says to run --recreate-slot; that run publishes, from the new
// slot's snapshot, only the rows the stream lacks (the events stored with
// plain ids before count as the first table's), then streams both tables
// with qualified ids. Nothing is stored twice.
func TestAddingATable(t *testing.T) {
	env := suite.NewEnv(t)
	a := contract.Table{Schema: "public", Name: "a_events"}
	b := contract.Table{Schema: "shop", Name: "b_events"}
	suite.UseTables(t, env, []contract.Table{a})
	row := relaytest.NewRow("order", "1", "created", `{}`)
	relay := suite.StartRelay(t, env)
	relay.WaitLog(relaytest.LogStreaming, 30*time.Second)
	for range 3 {
		env.TxIn(relaytest.In(a, row))
	}
	env.WaitStored(3, 30*time.Second)
	relay.Drain(30 * time.Second)

	suite.UseTables(t, env, []contract.Table{a, b})
	env.TxIn(relaytest.In(b, row), relaytest.In(a, row)) // while no relay runs
	relay = suite.StartRelay(t, env)
	if code := relay.Wait(30 * time.Second); code == 0 || !strings.Contains(relay.Logs(), "--recreate-slot") {
		t.Fatalf("the relay started on a changed list of tables (exit %d) without saying to run --recreate-slot:\n%s", code, relay.Logs())
	}
	relay = suite.StartRelay(t, env, "--recreate-slot")
	relay.WaitLog(relaytest.LogStreaming, 30*time.Second)
	if n, ok := relaytest.LogNumber(relay, "published the rows the stream lacked, from the slot's snapshot", "missing"); !ok || n != 2 {
		t.Errorf("the repair found %v rows missing (%v), want the 2 written while no relay ran", n, ok)
	}
	added := env.TxIn(relaytest.In(a, row), relaytest.In(b, row))
	env.WaitStored(env.CountRows(), 30*time.Second)
	env.WaitSlotCaughtUp(30 * time.Second)
	byID := relaytest.StoredByID(t, env)
	for _, id := range added {
		if byID[id] == nil {
			t.Errorf("event %s is not stored under its qualified id", id)
		}
	}
	env.CheckTables()
}
