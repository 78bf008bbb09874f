package takeup

import (
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
