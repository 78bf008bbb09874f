package messages

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

var (
	ordersTable   = contract.Table{Schema: "public", Name: "orders_events"}
	invoicesTable = contract.Table{Schema: "billing", Name: "invoice_events"}
)

// severalTables sets env up for a relay of the orders and invoices
// tables, both with bigserial ids (their ids collide), migrated by the
// binary with a least-privilege role the relay then runs as; subjects
// name the table.
func severalTables(t *testing.T, env *relaytest.Env) (role string) {
	t.Helper()
	env.Subject = "outbox.{schema}.{table}.{event_type}"
	role = "relay_" + env.Database
	suite.UseTables(t, env, []contract.Table{ordersTable, invoicesTable}, "--relay-role", role)
	env.RelayPG = strings.Replace(env.PGURL, "postgres://postgres@", "postgres://"+role+"@", 1)
	return role
}

// TestSeveralTables: one relay, one slot, one walsender, two outbox tables
// whose ids collide. The rows present when the slot is created are
// published from its snapshot, every table's; then transactions into one
// table, the other and both are stored once each, in commit order across
// the tables, each message naming its table (Outbox-Table, {schema} and
// {table} in its subject) and carrying its qualified id as Nats-Msg-Id.
// verify compares both tables and finds a deleted message by its table;
// --republish puts it back; doctor checks the second table's privileges.
func TestSeveralTables(t *testing.T) {
	env := suite.NewEnv(t)
	role := severalTables(t, env)
	orders := relaytest.In(ordersTable, relaytest.NewRow("order", "o1", "created", `{"n": 1}`))
	invoices := relaytest.In(invoicesTable, relaytest.NewRow("invoice", "i1", "issued", `{"n": 2}`))

	var before []string
	for range 3 {
		before = append(before, env.TxIn(orders, invoices)...)
	}
	relay := suite.StartRelay(t, env)
	relay.WaitLog(relaytest.LogStreaming, 30*time.Second)
	if n, ok := relaytest.LogNumber(relay, "created the replication slot; published the rows the stream needed from the table", "published"); !ok || n != 6 {
		t.Errorf("the take-up published %v rows (%v), want the 6 of both tables", n, ok)
	}
	var streamed []string
	for i := range 30 {
		switch i % 3 {
		case 0:
			streamed = append(streamed, env.TxIn(orders)...)
		case 1:
			streamed = append(streamed, env.TxIn(invoices)...)
		default:
			streamed = append(streamed, env.TxIn(invoices, orders, invoices)...)
		}
	}
	env.WaitStored(len(before)+len(streamed), 30*time.Second)
	env.WaitSlotCaughtUp(30 * time.Second)
	stored := time.Now()
	env.CheckTables()
	requireOneSlotOneSender(t, env, role)

	var inWAL []string
	for _, m := range relaytest.StreamInOrder(t, env) {
		id := m.Header.Get(contract.HeaderMsgID)
		table, _, ok := contract.SplitQualifiedID(id)
		want := fmt.Sprintf("outbox.%s.%s.%s", table.Schema, table.Name, m.Header.Get(contract.HeaderEventType))
		if !ok || m.Header.Get(contract.HeaderTable) != table.String() || m.Subject != want {
			t.Errorf("message %d: Nats-Msg-Id %q, Outbox-Table %q, subject %q; want a qualified id, its table, and %q",
				m.Sequence, id, m.Header.Get(contract.HeaderTable), m.Subject, want)
		}
		if m.Header.Get(contract.HeaderCommitLSN) != "0/0" {
			inWAL = append(inWAL, id)
		}
	}
	if !slices.Equal(inWAL, streamed) {
		t.Errorf("streamed events stored in the order\n%v\nwant the commit order\n%v", inWAL, streamed)
	}
	checkVerifyTables(t, env, before[3], stored)
	if out, err := suite.Relay.RunCLI(t, append([]string{"status"}, env.ToolArgs()...)...); err != nil || !strings.Contains(out, "active             yes") {
		t.Errorf("status of the relay of two tables: %v\n%s", err, out)
	}
	checkDoctorTables(t, env, role)
}

// requireOneSlotOneSender: the relay of several tables holds one slot and
// one walsender.
func requireOneSlotOneSender(t *testing.T, env *relaytest.Env, role string) {
	t.Helper()
	var slots, senders int
	if err := env.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM pg_replication_slots WHERE database = current_database()),
		(SELECT count(*) FROM pg_stat_replication WHERE usename = $1)`, role).Scan(&slots, &senders); err != nil {
		t.Fatal(err)
	}
	if slots != 1 || senders != 1 {
		t.Errorf("%d slots and %d walsenders for the relay of two tables, want one of each", slots, senders)
	}
}

// checkVerifyTables: verify compares both tables (exit 0), then finds the
// message of one table's row deleted from the stream, by its qualified id
// (exit 1), and --republish stores it again once the duplicate window of
// its first publish has passed.
func checkVerifyTables(t *testing.T, env *relaytest.Env, victim string, stored time.Time) {
	t.Helper()
	verify := append([]string{"verify"}, env.ToolArgs()...)
	if out, err := suite.Relay.RunCLI(t, verify...); err != nil || !strings.Contains(out, "OK: every committed row") {
		t.Fatalf("verify of two tables: %v\n%s", err, out)
	}
	if !strings.HasPrefix(victim, invoicesTable.String()+"/") {
		t.Fatalf("victim %q is not an invoice", victim)
	}
	seq := relaytest.StoredByID(t, env)[victim].Sequence
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := env.StreamHandle(time.Second).DeleteMsg(ctx, seq); err != nil {
		t.Fatal(err)
	}
	out, err := suite.Relay.RunCLI(t, verify...)
	if err == nil || !strings.Contains(out, "missing:          1 "+victim) {
		t.Fatalf("verify after deleting %s: %v\n%s", victim, err, out)
	}
	time.Sleep(time.Until(stored.Add(2 * env.DuplicateWindow))) // JetStream would drop the copy as a duplicate within the window
	if out, err := suite.Relay.RunCLI(t, append(verify, "--republish")...); err != nil || !strings.Contains(out, "OK: every committed row") {
		t.Fatalf("verify --republish: %v\n%s", err, out)
	}
	env.CheckTables()
}

// checkDoctorTables: doctor, as the relay's role, finds nothing wrong with
// both tables, then names the second table the role may no longer read.
func checkDoctorTables(t *testing.T, env *relaytest.Env, role string) {
	t.Helper()
	doctor := append(append([]string{"doctor"}, env.ToolArgs()...), "--pg-url", env.RelayPG, "--max-outage", env.DuplicateWindow.String())
	if out, err := suite.Relay.RunCLI(t, doctor...); err != nil {
		t.Fatalf("doctor of two tables: %v\n%s", err, out)
	}
	env.Exec(`REVOKE SELECT ON ` + invoicesTable.Quoted() + ` FROM ` + role)
	out, err := suite.Relay.RunCLI(t, doctor...)
	if err == nil || !strings.Contains(out, `GRANT SELECT ON "billing"."invoice_events" TO "`+role+`"`) {
		t.Fatalf("doctor with the second table unreadable: %v\n%s", err, out)
	}
}

// TestSeveralTablesDeadLetters: rows of two tables with the same id that
// cannot be published are two dead letters, recorded under their
// qualified ids; `dlq list` shows both with their rows, cleanup keeps both
// rows while it deletes the published ones, and `dlq retry --all`
// publishes both once the rows are fixed.
func TestSeveralTablesDeadLetters(t *testing.T) {
	env := suite.NewEnv(t)
	severalTables(t, env)
	relay := suite.StartRelay(t, env)
	relay.WaitLog(relaytest.LogStreaming, 30*time.Second)
	good := env.TxIn(relaytest.In(ordersTable, relaytest.NewRow("order", "1", "created", `{}`)), relaytest.In(invoicesTable, relaytest.NewRow("invoice", "1", "issued", `{}`)))
	for _, table := range []contract.Table{ordersTable, invoicesTable} {
		env.Exec(`INSERT INTO ` + table.Quoted() + ` (id, aggregate_type, aggregate_id, event_type, payload, headers)
			VALUES (1000, 'order', '2', 'forged', '{}', '{"Nats-Msg-Id": "forged"}')`)
	}
	env.WaitStored(4, 30*time.Second)
	env.WaitSlotCaughtUp(30 * time.Second)
	env.CheckTables()
	dead := []string{contract.QualifiedID(ordersTable.String(), "1000"), contract.QualifiedID(invoicesTable.String(), "1000")}

	list := []string{"dlq", "list", "--pg-url", env.PGURL, "--table", ordersTable.String(), "--table", invoicesTable.String()}
	out, err := suite.Relay.RunCLI(t, list...)
	if err != nil {
		t.Fatalf("dlq list: %v\n%s", err, out)
	}
	for _, id := range dead {
		if !slices.ContainsFunc(strings.Split(out, "\n"), func(line string) bool {
			f := strings.Fields(line)
			return len(f) > 1 && f[0] == id && f[1] == "forged"
		}) {
			t.Errorf("dlq list lacks %s with its row's event type:\n%s", id, out)
		}
	}

	cleanup := []string{"cleanup", "--retention", "0s", "--wait", "1m", "--pg-url", env.PGURL, "--slot", env.Slot,
		"--table", ordersTable.String(), "--table", invoicesTable.String(), "--log-format", "json"}
	if out, err := suite.Relay.RunCLI(t, cleanup...); err != nil || strings.Count(out, "kept: 1 dead letters") != 2 {
		t.Fatalf("cleanup of two tables: %v\n%s", err, out)
	}
	if left := env.CountRows(); left != 2 {
		t.Fatalf("cleanup left %d rows, want the 2 dead letters (the published %v deleted)", left, good)
	}

	for _, table := range []contract.Table{ordersTable, invoicesTable} {
		env.Exec(`UPDATE ` + table.Quoted() + ` SET headers = NULL WHERE id = 1000`)
	}
	retry := append([]string{"dlq", "retry", "--all"}, env.ToolArgs()...)
	out, err = suite.Relay.RunCLI(t, retry...)
	if err != nil {
		t.Fatalf("dlq retry --all: %v\n%s", err, out)
	}
	byID := relaytest.StoredByID(t, env)
	for _, id := range dead {
		if !strings.Contains(out, id+" published") {
			t.Errorf("dlq retry did not publish %s:\n%s", id, out)
		}
		if m := byID[id]; m == nil || m.Subject == env.DeadSubj {
			t.Errorf("after the retry, %s is not stored on its event subject: %+v", id, m)
		}
	}
}

// TestMigrateSeveralTables: migrate with several tables puts every one in
// the publication named, also a table migrated before for another
// publication (a relay of one table that now reads several).
func TestMigrateSeveralTables(t *testing.T) {
	env := suite.NewEnv(t) // outbox_events, migrated for outbox_pub
	env.Exec(`CREATE SCHEMA billing`)
	out, err := suite.Relay.RunCLI(t, "migrate", "--pg-url", env.PGURL, "--publication", "both_pub", "--log-format", "json",
		"--table", env.Table.String(), "--table", invoicesTable.String())
	if err != nil {
		t.Fatalf("migrate two tables: %v\n%s", err, out)
	}
	rows, err := env.Pool.Query(context.Background(), `SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = 'both_pub' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if want := []string{"billing.invoice_events", "public.outbox_events"}; !slices.Equal(got, want) {
		t.Errorf("publication both_pub holds %v, want %v", got, want)
	}
}
