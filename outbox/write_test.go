package outbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// stored is an outbox row as read back.
type stored struct {
	AggregateType, AggregateID, EventType, Payload string
}

func readRows(t *testing.T, env *relaytest.Env, table string, ids []string) []stored {
	t.Helper()
	out := make([]stored, len(ids))
	for i, id := range ids {
		r := &out[i]
		err := env.Pool.QueryRow(context.Background(),
			`SELECT aggregate_type, aggregate_id, event_type, payload::text FROM `+table+` WHERE id = $1`, id).
			Scan(&r.AggregateType, &r.AggregateID, &r.EventType, &r.Payload)
		if err != nil {
			t.Fatalf("row %d (%s): %v", i, id, err)
		}
	}
	return out
}

// awkward are values that must reach the table exactly, whichever driver
// carries them: quotes, backslashes, array punctuation, "NULL", spaces at
// the ends, non-ASCII.
var awkward = []string{`q"uote`, `back\slash`, `{brace},comma`, "NULL", " spaced ", "ordén.creado ✓", `\"`}

func events(n int) []outbox.Event {
	evs := make([]outbox.Event, n)
	for i := range evs {
		evs[i] = outbox.Event{
			AggregateType: awkward[i%len(awkward)], AggregateID: fmt.Sprint(i), EventType: "order.created",
			Payload: map[string]any{"i": i, "note": awkward[(i+1)%len(awkward)]},
		}
	}
	return evs
}

func checkRows(t *testing.T, env *relaytest.Env, evs []outbox.Event, ids []string) {
	t.Helper()
	if len(ids) != len(evs) {
		t.Fatalf("%d ids for %d events", len(ids), len(evs))
	}
	seen := map[string]bool{}
	for i, r := range readRows(t, env, "outbox_events", ids) {
		if seen[ids[i]] {
			t.Fatalf("id %s returned twice", ids[i])
		}
		seen[ids[i]] = true
		ev := evs[i]
		want, _ := json.Marshal(ev.Payload)
		var got, wantV any
		_ = json.Unmarshal([]byte(r.Payload), &got)
		_ = json.Unmarshal(want, &wantV)
		if r.AggregateType != ev.AggregateType || r.AggregateID != ev.AggregateID || r.EventType != ev.EventType || fmt.Sprint(got) != fmt.Sprint(wantV) {
			t.Fatalf("id %d (%s) holds %+v, want event %+v", i, ids[i], r, ev)
		}
	}
}

// begin starts a transaction on db that is rolled back when the test
// ends unless it was committed (a no-op then): a test that fails must not
// leave it open, or closing the pool waits for it until the test timeout.
func begin(t *testing.T, db interface {
	Begin(context.Context) (pgx.Tx, error)
}) pgx.Tx {
	t.Helper()
	tx, err := db.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// beginSQL is begin for database/sql; the rollback releases the pool's
// connection, which closing db does not while a transaction holds it.
func beginSQL(t *testing.T, db *sql.DB) *sql.Tx {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	return tx
}

// commitBoth writes with viaPgx in a pgx transaction, then with viaSQL in
// a database/sql one, commits each, and returns the ids both returned, in
// that order.
func commitBoth(t *testing.T, env *relaytest.Env, viaPgx func(pgx.Tx) ([]string, error), viaSQL func(*sql.Tx) ([]string, error)) []string {
	t.Helper()
	ctx := context.Background()
	tx := begin(t, env.Pool)
	ids, err := viaPgx(tx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDBFromPool(env.Pool)
	t.Cleanup(func() { db.Close() }) // after the rollback: cleanups run last first
	stx := beginSQL(t, db)
	more, err := viaSQL(stx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stx.Commit(); err != nil {
		t.Fatal(err)
	}
	return append(ids, more...)
}

// Write sends one statement for the whole batch, inside the caller's
// transaction, and returns the ids in the order of the events.
func TestWritePgx(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	ctx := context.Background()
	var c counter
	pool := tracedPool(t, env, &c)
	for _, n := range []int{1, 7, 5000} {
		evs := events(n)
		tx := begin(t, pool)
		before := c.n.Load()
		ids, err := outbox.Write(ctx, tx, evs...)
		if err != nil {
			t.Fatal(err)
		}
		if sent := c.n.Load() - before; sent != 1 {
			t.Fatalf("%d events took %d statements, want 1", n, sent)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		checkRows(t, env, evs, ids)
	}
	if ids, err := outbox.Write(ctx, pool); err != nil || ids != nil {
		t.Fatalf("no events: %v %v", ids, err)
	}
}

// WriteSQL is the same through database/sql: the arrays travel as text.
func TestWriteSQL(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	ctx := context.Background()
	var c counter
	cfg, err := pgx.ParseConfig(env.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Tracer = &c
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	for _, n := range []int{1, 7, 5000} {
		evs := events(n)
		tx := beginSQL(t, db)
		before := c.n.Load()
		ids, err := outbox.WriteSQL(ctx, tx, evs...)
		if err != nil {
			t.Fatal(err)
		}
		if sent := c.n.Load() - before; sent != 1 {
			t.Fatalf("%d events took %d statements, want 1", n, sent)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		checkRows(t, env, evs, ids)
	}
}

// A refused event leaves the caller's transaction usable: the business
// write still commits, and no event of the refused call is written.
func TestRefusedKeepsTransaction(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	ctx := context.Background()
	env.Exec(`CREATE TABLE orders (id text PRIMARY KEY)`)
	db := stdlib.OpenDBFromPool(env.Pool)
	t.Cleanup(func() { db.Close() })

	tx := begin(t, env.Pool)
	if _, err := tx.Exec(ctx, `INSERT INTO orders VALUES ('a')`); err != nil {
		t.Fatal(err)
	}
	bad := outbox.Event{AggregateType: "order", AggregateID: "a", EventType: "order.created", Payload: []byte(`{"x": "\u0000"}`)}
	if _, err := outbox.Write(ctx, tx, events(1)[0], bad); !errors.Is(err, outbox.ErrInvalidPayload) {
		t.Fatalf("got %v, want ErrInvalidPayload", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit after a refused event: %v", err)
	}

	stx := beginSQL(t, db)
	if _, err := stx.ExecContext(ctx, `INSERT INTO orders VALUES ('b')`); err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.WriteSQL(ctx, stx, bad); !errors.Is(err, outbox.ErrInvalidPayload) {
		t.Fatalf("got %v, want ErrInvalidPayload", err)
	}
	if err := stx.Commit(); err != nil {
		t.Fatalf("commit after a refused event: %v", err)
	}

	var orders, rows int
	if err := env.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM outbox_events)`).Scan(&orders, &rows); err != nil {
		t.Fatal(err)
	}
	if orders != 2 || rows != 0 {
		t.Fatalf("%d orders and %d outbox rows, want 2 and 0", orders, rows)
	}
}

// Events written in a transaction that rolls back are gone with it.
func TestRollback(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	ctx := context.Background()
	tx := begin(t, env.Pool)
	if _, err := outbox.Write(ctx, tx, events(3)...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows after rollback (%v), want 0", n, err)
	}
}

// WithTable writes to another outbox table, as --table would read.
func TestWithTable(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	ctx := context.Background()
	env.Exec(`CREATE SCHEMA shop`)
	cfg, err := pgx.ParseConfig(env.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(ctx, cfg, migrations.Names{Table: contract.Table{Schema: "shop", Name: "order_events"}, Publication: "shop_pub"}); err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(outbox.WithTable("shop.order_events"))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := w.Write(ctx, env.Pool, events(2)...)
	if err != nil {
		t.Fatal(err)
	}
	if got := readRows(t, env, "shop.order_events", ids); got[1].AggregateID != "1" {
		t.Fatalf("read back %+v", got)
	}
	var n int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows in the default table (%v), want 0", n, err)
	}
}

// Payloads in every accepted form are stored as the JSON they denote.
func TestPayloadForms(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	ctx := context.Background()
	type body struct {
		Total int    `json:"total"`
		Note  string `json:"note,omitempty"`
	}
	cases := []struct {
		payload any
		want    string // payload::text
	}{
		{json.RawMessage(`{"total":10}`), `{"total": 10}`},
		{[]byte(" [1, 2.50, -0, 1.5e3, true, null, \"\\ud83d\\ude00\\/\"] "), `[1, 2.50, 0, 1500, true, null, "😀/"]`},
		{body{Total: 3, Note: "<&>"}, `{"note": "<&>", "total": 3}`},
		{"a JSON string", `"a JSON string"`},
		{json.RawMessage(`null`), `null`},
	}
	for i, c := range cases {
		ids, err := outbox.Write(ctx, env.Pool, outbox.Event{AggregateType: "t", AggregateID: fmt.Sprint(i), EventType: "e", Payload: c.payload})
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if got := readRows(t, env, "outbox_events", ids)[0].Payload; got != c.want {
			t.Errorf("case %d: stored %s, want %s", i, got, c.want)
		}
	}
}

// The size check is on the published form: the limit counts the jsonb
// text Postgres gives back (what the relay publishes) and the relay's
// headers, so a payload compact enough as sent but too large as published
// is refused.
func TestMaxPayload(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	ctx := context.Background()
	const limit = 8192
	w, err := outbox.NewWriter(outbox.WithMaxPayload(limit))
	if err != nil {
		t.Fatal(err)
	}
	ev := outbox.Event{AggregateType: "order", AggregateID: "1", EventType: "order.created"}
	room := limit - 1024 - 3*len("order1order.created") // what the payload may take as published
	fits := `"` + strings.Repeat("x", room-2) + `"`
	ev.Payload = []byte(fits)
	ids, err := w.Write(ctx, env.Pool, ev)
	if err != nil {
		t.Fatalf("a payload of exactly the room left: %v", err)
	}
	var published int
	if err := env.Pool.QueryRow(ctx, `SELECT octet_length(payload::text) FROM outbox_events WHERE id = $1`, ids[0]).Scan(&published); err != nil || published != room {
		t.Fatalf("published size %d (%v), want %d", published, err, room)
	}
	ev.Payload = []byte(`"` + strings.Repeat("x", room-1) + `"`)
	if _, err := w.Write(ctx, env.Pool, ev); !errors.Is(err, outbox.ErrPayloadTooLarge) {
		t.Fatalf("one byte more: %v, want ErrPayloadTooLarge", err)
	}
	// [0,0,...] is 2 bytes per element as sent and 3 as published.
	compact := "[" + strings.TrimSuffix(strings.Repeat("0,", room/3+100), ",") + "]"
	if len(compact) > room {
		t.Fatal("test payload too large as sent")
	}
	ev.Payload = []byte(compact)
	if _, err := w.Write(ctx, env.Pool, ev); !errors.Is(err, outbox.ErrPayloadTooLarge) {
		t.Fatalf("compact payload too large as published: %v, want ErrPayloadTooLarge", err)
	}
}

// TestWriteHeaders: an event's own headers land in the headers column, with
// pgx and database/sql; events without them get NULL there, also in the same
// batch.
func TestWriteHeaders(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	ctx := context.Background()
	evs := []outbox.Event{valid(), valid()}
	evs[0].Headers = map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "x-note": awkward[0]}
	ids := commitBoth(t, env,
		func(tx pgx.Tx) ([]string, error) { return outbox.Write(ctx, tx, evs...) },
		func(tx *sql.Tx) ([]string, error) { return outbox.WriteSQL(ctx, tx, evs...) })
	if len(ids) != 2*len(evs) {
		t.Fatalf("%d ids for %d events written with pgx and %d with database/sql", len(ids), len(evs), len(evs))
	}
	for i, id := range ids {
		var headers *string
		if err := env.Pool.QueryRow(ctx, `SELECT headers::text FROM outbox_events WHERE id = $1`, id).Scan(&headers); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			if headers != nil {
				t.Errorf("event %d without headers stored %s", i, *headers)
			}
			continue
		}
		var hs map[string]string
		if headers == nil || json.Unmarshal([]byte(*headers), &hs) != nil || fmt.Sprint(hs) != fmt.Sprint(evs[0].Headers) {
			t.Errorf("event %d stored headers %v, want %v", i, headers, evs[0].Headers)
		}
	}
}

// TestHeadersWithoutColumn: events with headers, written to a table that
// has no headers column, fail with what to do; events without headers
// are written there as before.
func TestHeadersWithoutColumn(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	ctx := context.Background()
	env.Exec(`CREATE TABLE plain_events (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), aggregate_type text NOT NULL,
		aggregate_id text NOT NULL, event_type text NOT NULL, payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`)
	w, err := outbox.NewWriter(outbox.WithTable("plain_events"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(ev outbox.Event) error {
		tx, err := env.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		_, err = w.Write(ctx, tx, ev)
		return err
	}
	if err := write(valid()); err != nil {
		t.Fatalf("an event without headers: %v", err)
	}
	ev := valid()
	ev.Headers = map[string]string{"traceparent": "t"}
	if err := write(ev); err == nil || !strings.Contains(err.Error(), "outbox-relay migrate") {
		t.Fatalf("an event with headers into a table without the column: %v", err)
	}
}
