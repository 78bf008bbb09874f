package replication_test

import (
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// TestRealPgoutputMessages streams table-less events (outbox.Emit) mixed
// with rows from a real Postgres with the messages option, and decodes
// the bytes: commit order, one index sequence per transaction, rolled-back
// and other-prefix messages absent, a non-transactional one ignored,
// hostile content a dead letter. With -update it stores the bytes in
// decode/testdata/messages for the decoder's tests and fuzz corpus.
func TestRealPgoutputMessages(t *testing.T) {
	ctx, conn, repl := startCapture(t, "outbox_events")
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	ev := func(aggID, typ string) outbox.Event {
		return outbox.Event{AggregateType: "order", AggregateID: aggID, EventType: typ, Payload: map[string]any{"b": []int{1, 2}, "total": 10}}
	}
	var want []string // event ids in commit order
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := outbox.Write(ctx, tx, ev("1", "order.created"))
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, ids...)
	if ids, err = outbox.Emit(ctx, tx, ev("1", "order.paid"), ev("1", "order.shipped")); err != nil {
		t.Fatal(err)
	}
	want = append(want, ids...)
	if ids, err = outbox.Write(ctx, tx, ev("1", "order.closed")); err != nil {
		t.Fatal(err)
	}
	want = append(want, ids...)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err = conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err = outbox.Emit(ctx, tx, ev("2", "rolled.back")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	exec(`SELECT pg_logical_emit_message(true, 'other', 'not ours')`)
	exec(`SELECT pg_logical_emit_message(false, 'outbox', '{"id": "non-transactional"}')`)
	tx, err = conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ids, err = outbox.Emit(ctx, tx, ev("3", "only.messages")); err != nil {
		t.Fatal(err)
	}
	want = append(want, ids...)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	exec(`SELECT pg_logical_emit_message(true, 'outbox', 'not json')`)

	err = pglogrepl.StartReplication(ctx, repl, "cap", 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'cap_pub'", "messages 'true'"}})
	if err != nil {
		t.Fatal(err)
	}
	captured := receiveCommits(ctx, t, repl, 4)

	events, ignored := decodeStream(t, captured, decode.WithMessagePrefix("outbox"))
	if len(events) != len(want)+1 {
		t.Fatalf("decoded %d events, want %d and a dead letter: %+v", len(events), len(want)+1, events)
	}
	for i, id := range want {
		e := events[i]
		if e.ID != id || e.Problem != "" || e.AggregateType != "order" || string(e.Payload) != `{"b": [1, 2], "total": 10}` || len(e.CreatedAt) < 20 {
			t.Errorf("event %d = %+v (payload %s), want id %s", i, e, e.Payload, id)
		}
	}
	for i := range 4 {
		if p := events[i].Position; p.CommitLSN != events[0].Position.CommitLSN || p.Index != uint32(i) {
			t.Errorf("event %d of the first transaction at %v", i, p)
		}
	}
	if p := events[4].Position; p.Index != 0 || p.CommitLSN <= events[0].Position.CommitLSN {
		t.Errorf("the message-only transaction's event at %v", p)
	}
	if last := events[len(events)-1]; last.Problem == "" || string(last.Payload) != "not json" {
		t.Errorf("hostile content decoded as %+v", last)
	}
	if len(ignored) != 1 {
		t.Errorf("ignored %v, want the non-transactional message", ignored)
	}
	if *update {
		writeCaptured(t, captured, "messages")
	}
}
