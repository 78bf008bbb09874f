package replication_test

import (
	"context"
	"encoding/binary"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

var update = flag.Bool("update", false, "rewrite decode/testdata/captured from a real server")

// TestRealPgoutputBytes streams known transactions from a real Postgres,
// decodes the bytes it sends, and checks the events. With -update it also
// stores the bytes for the decoder's own tests and fuzz corpus.
func TestRealPgoutputBytes(t *testing.T) {
	ctx, conn, repl := startCapture(t, "outbox_events, orders", `CREATE TABLE orders (id BIGSERIAL PRIMARY KEY, total NUMERIC)`)
	exec := func(sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	exec(`INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at)
		VALUES ('11111111-1111-1111-1111-111111111111', 'order', '42', 'order.created', '{"total": 10, "b": [1, 2]}', '2026-12-02 11:36:09.123456+00')`)
	exec(`BEGIN; INSERT INTO orders (total) VALUES (1.5);
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '43', 'order.paid', '{}');
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '43', 'order.shipped', '{"x": "é"}'); COMMIT`)
	exec(`BEGIN; INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('x', 'y', 'rolled.back', '{}'); ROLLBACK`)
	exec(`UPDATE outbox_events SET processed_at = now() WHERE aggregate_id = '42'`)
	exec(`DELETE FROM outbox_events WHERE aggregate_id = '42'`)
	exec(`TRUNCATE orders, outbox_events`)
	exec(`INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('big', '1', 'big', jsonb_build_object('s', repeat('z', 10000)))`)

	err := pglogrepl.StartReplication(ctx, repl, "cap", 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'cap_pub'"}})
	if err != nil {
		t.Fatal(err)
	}
	captured := receiveCommits(ctx, t, repl, 6)

	events, ignored := decodeStream(t, captured)
	want := []struct{ aggID, evType string }{{"42", "order.created"}, {"43", "order.paid"}, {"43", "order.shipped"}, {"1", "big"}}
	if len(events) != len(want) {
		t.Fatalf("decoded %d events, want %d: %+v", len(events), len(want), events)
	}
	for i, w := range want {
		if events[i].AggregateID != w.aggID || events[i].EventType != w.evType || events[i].Problem != "" {
			t.Errorf("event %d = %+v, want %s %s", i, events[i], w.aggID, w.evType)
		}
	}
	if e := events[0]; e.ID != "11111111-1111-1111-1111-111111111111" || string(e.Payload) != `{"b": [1, 2], "total": 10}` || e.CreatedAt != "2026-12-02T11:36:09.123456Z" {
		t.Errorf("first event = %+v (payload %s)", e, e.Payload)
	}
	if events[1].Position.CommitLSN != events[2].Position.CommitLSN || events[2].Position.Index != 1 {
		t.Errorf("events of one transaction: %v %v", events[1].Position, events[2].Position)
	}
	if len(events[3].Payload) < 10000 {
		t.Errorf("big payload has %d bytes", len(events[3].Payload))
	}
	if len(ignored) != 3 {
		t.Errorf("ignored changes %v, want the UPDATE, DELETE and TRUNCATE", ignored)
	}
	if *update {
		writeCaptured(t, captured, "captured")
	}
}

// startCapture starts a private cluster with the outbox table (and the
// statements in more), a publication cap_pub of tables, and a replication
// connection holding a new pgoutput slot "cap". Everything ends with t.
func startCapture(t *testing.T, tables string, more ...string) (context.Context, *pgx.Conn, *pgconn.PgConn) {
	t.Helper()
	cluster := relaytest.PrivateCluster(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	conn, err := pgx.Connect(ctx, cluster.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	ddl := append([]string{`CREATE TABLE outbox_events (id UUID PRIMARY KEY DEFAULT gen_random_uuid(), aggregate_type VARCHAR(100) NOT NULL,
		aggregate_id VARCHAR(100) NOT NULL, event_type VARCHAR(100) NOT NULL, payload JSONB NOT NULL,
		attempts INT NOT NULL DEFAULT 0, created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(), processed_at TIMESTAMPTZ)`}, more...)
	ddl = append(ddl, `CREATE PUBLICATION cap_pub FOR TABLE `+tables)
	for _, sql := range ddl {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	replCfg, err := pgconn.ParseConfig(cluster.URL("postgres") + "&replication=database&TimeZone=UTC&DateStyle=ISO")
	if err != nil {
		t.Fatal(err)
	}
	repl, err := pgconn.ConnectConfig(ctx, replCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { repl.Close(context.Background()) })
	if _, err := pglogrepl.CreateReplicationSlot(ctx, repl, "cap", "pgoutput", pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication}); err != nil {
		t.Fatal(err)
	}
	return ctx, conn, repl
}

// receiveCommits returns the WALData received until n commits arrived.
func receiveCommits(ctx context.Context, t *testing.T, repl *pgconn.PgConn, n int) [][]byte {
	t.Helper()
	var captured [][]byte
	for commits := 0; commits < n; {
		msg, err := repl.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("receive (have %d commits): %v", commits, err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok || cd.Data[0] != pglogrepl.XLogDataByteID {
			continue
		}
		xld, err := pglogrepl.ParseXLogData(cd.Data[1:])
		if err != nil {
			t.Fatal(err)
		}
		captured = append(captured, append([]byte(nil), xld.WALData...))
		if xld.WALData[0] == 'C' {
			commits++
		}
	}
	return captured
}

func decodeStream(t *testing.T, msgs [][]byte, opts ...decode.Option) ([]decode.Event, []string) {
	t.Helper()
	d := decode.NewDecoder(contract.Table{Schema: "public", Name: "outbox_events"}, opts...)
	var events []decode.Event
	var ignored []string
	for i, m := range msgs {
		got, err := d.Decode(m)
		if err != nil {
			t.Fatalf("message %d (%q): %v", i, m[0], err)
		}
		switch got.Kind {
		case decode.KindEvent:
			events = append(events, got.Event)
		case decode.KindIgnored:
			ignored = append(ignored, got.Ignored)
		}
	}
	return events, ignored
}

// writeCaptured stores msgs, each after its length, as
// decode/testdata/<dir>/pg15.bin: the decoder's tests and fuzz corpus.
func writeCaptured(t *testing.T, msgs [][]byte, dir string) {
	t.Helper()
	var out []byte
	for _, m := range msgs {
		out = binary.BigEndian.AppendUint32(out, uint32(len(m)))
		out = append(out, m...)
	}
	name := filepath.Join("..", "decode", "testdata", dir, "pg15.bin")
	if err := os.WriteFile(name, out, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %d messages to %s", len(msgs), name)
}
