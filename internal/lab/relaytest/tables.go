package relaytest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/verify"
)

// serialTableDDL is the seed's outbox table with a bigserial id instead
// of a UUID: the ids of two such tables collide (both count from 1),
// which is what a relay of several tables must tell apart.
const serialTableDDL = `CREATE TABLE IF NOT EXISTS %s (
    id             BIGSERIAL    PRIMARY KEY,
    aggregate_type VARCHAR(100) NOT NULL,
    aggregate_id   VARCHAR(100) NOT NULL,
    event_type     VARCHAR(100) NOT NULL,
    payload        JSONB        NOT NULL,
    attempts       INT          NOT NULL DEFAULT 0,
    created_at     TIMESTAMPTZ  NOT NULL DEFAULT NOW(),
    processed_at   TIMESTAMPTZ
)`

// UseTables makes tables the Env's relay's outbox tables: each is created
// (in its schema) with a bigserial id unless it exists, then `outbox-relay migrate` with a
// --table for each adds them to the Env's publication, as a user would;
// Table becomes the first and MoreTables the rest. migrateArgs are added
// to migrate's command line (--relay-role, say).
func (s *Suite) UseTables(t testing.TB, env *Env, tables []contract.Table, migrateArgs ...string) {
	t.Helper()
	for _, table := range tables {
		env.Exec(`CREATE SCHEMA IF NOT EXISTS ` + pgx.Identifier{table.Schema}.Sanitize())
		env.Exec(fmt.Sprintf(serialTableDDL, table.Quoted()))
	}
	if !slices.Contains(tables, env.Table) {
		// The Env's own table leaves the publication: the relay reads these.
		env.Exec(`ALTER PUBLICATION ` + pgx.Identifier{env.Pub}.Sanitize() + ` DROP TABLE ` + env.Table.Quoted())
	}
	args := []string{"migrate", "--pg-url", env.PGURL, "--publication", env.Pub, "--log-format", "json"}
	for _, table := range tables {
		args = append(args, "--table", table.String())
	}
	if out, err := s.Relay.RunCLI(t, append(args, migrateArgs...)...); err != nil {
		t.Fatalf("migrate %d tables: %v\n%s", len(tables), err, out)
	}
	env.Table, env.MoreTables = tables[0], tables[1:]
}

// TableRow is a row of one of the Env's tables.
type TableRow struct {
	Table contract.Table
	Row
}

// In returns row as a row of table.
func In(table contract.Table, row Row) TableRow { return TableRow{Table: table, Row: row} }

// TxIn inserts rows, each into its table, in one transaction, and returns
// their ids as the stream knows them: qualified by their table
// (contract.QualifiedID) when the Env has several tables.
func (e *Env) TxIn(rows ...TableRow) []string {
	e.T.Helper()
	ctx := context.Background()
	tx, err := e.Pool.Begin(ctx)
	if err != nil {
		e.T.Fatal(err)
	}
	defer tx.Rollback(ctx)
	ids := make([]string, 0, len(rows))
	for _, r := range rows {
		var id string
		err := tx.QueryRow(ctx, `INSERT INTO `+r.Table.Quoted()+` (aggregate_type, aggregate_id, event_type, payload)
			VALUES ($1, $2, $3, $4) RETURNING id::text`, r.AggregateType, r.AggregateID, r.EventType, r.Payload).Scan(&id)
		if err != nil {
			e.T.Fatalf("insert into %s: %v", r.Table, err)
		}
		ids = append(ids, e.StreamID(r.Table, id))
	}
	if err := tx.Commit(ctx); err != nil {
		e.T.Fatal(err)
	}
	return ids
}

// StreamID is the id under which the stream holds the row of table with
// id: qualified when the Env has several tables.
func (e *Env) StreamID(table contract.Table, id string) string {
	if len(e.MoreTables) == 0 {
		return id
	}
	return contract.QualifiedID(table.String(), id)
}

// AllTables returns Table and MoreTables.
func (e *Env) AllTables() []contract.Table { return append([]contract.Table{e.Table}, e.MoreTables...) }

// CountRows counts the rows of every table of the Env.
func (e *Env) CountRows() int {
	e.T.Helper()
	n := 0
	for _, table := range e.AllTables() {
		var rows int
		if err := e.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+table.Quoted()).Scan(&rows); err != nil {
			e.T.Fatal(err)
		}
		n += rows
	}
	return n
}

// CheckTables compares every table of the Env with the stream (verify
// with MoreTables) and fails the test on any missing, extra, duplicated,
// reordered or unreadable message; it also fails when two messages carry
// one Nats-Msg-Id, whatever verify makes of them.
func (e *Env) CheckTables() verify.Report {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stream := e.StreamHandle(10 * time.Second)
	reader := jssink.NewReader(e.JS, stream, subjectFilter(e), e.DeadSubj, nil)
	rep, err := verify.Run(ctx, e.Pool, reader, verify.Options{Table: e.Table, MoreTables: e.MoreTables})
	if err != nil {
		e.T.Fatal(err)
	}
	if !rep.OK() {
		dups := make([]string, 0, len(rep.Duplicates))
		for id, n := range rep.Duplicates {
			dups = append(dups, fmt.Sprintf("%s×%d", id, n))
		}
		slices.Sort(dups)
		e.T.Fatalf("table vs stream: %d rows, %d messages; missing %d %v, extra %d %v, duplicated %d %v, out of order %v, unparsed %v",
			rep.Rows, rep.Messages, len(rep.Missing), first(rep.Missing), len(rep.Extra), first(rep.Extra), len(dups), first(dups), rep.OrderViolations, rep.Unparsed)
	}
	seen := map[string]uint64{}
	for _, m := range StreamInOrder(e.T, e) {
		id := m.Header.Get(contract.HeaderMsgID)
		if prev, dup := seen[id]; dup {
			e.T.Fatalf("Nats-Msg-Id %q stored twice: sequences %d and %d", id, prev, m.Sequence)
		}
		seen[id] = m.Sequence
	}
	return rep
}

// first returns up to ten of ids, for a failure message.
func first(ids []string) []string { return ids[:min(len(ids), 10)] }

// subjectFilter is the filter of the Env's subject template.
func subjectFilter(e *Env) string {
	dots, err := sink.ParseDots(e.SubjectDots)
	if err != nil {
		e.T.Fatal(err)
	}
	tpl, err := sink.ParseTemplate(e.Subject, sink.WithDots(dots))
	if err != nil {
		e.T.Fatal(err)
	}
	return tpl.Filter()
}
