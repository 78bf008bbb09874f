package jetstream

import (
	"testing"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/sink"
)

// TestWireTable: a message names its event's table (Outbox-Table); with
// several tables its Nats-Msg-Id, and its dead letter's, are qualified by
// the table, so equal ids of two tables are two dedup keys, and read back
// (ParseStored) the same way; a table-less event that reuses the message
// carries no table.
func TestWireTable(t *testing.T) {
	w := newWireMsg()
	ev := &decode.Event{ID: "1", Table: "shop.order_events", QualifyID: true, AggregateType: "order", AggregateID: "7", EventType: "created",
		Payload: []byte(`{}`), Position: decode.Position{CommitLSN: 0x10, Index: 1}}
	w.fillEvent(ev, "outbox.order.created", "r")
	if got := w.msg.Header.Get(contract.HeaderMsgID); got != "shop.order_events/1" {
		t.Errorf("Nats-Msg-Id = %q, want shop.order_events/1", got)
	}
	if got := w.msg.Header.Get(contract.HeaderTable); got != "shop.order_events" {
		t.Errorf("Outbox-Table = %q", got)
	}
	stored, ok := ParseStored(&natsjs.RawStreamMsg{Header: w.msg.Header, Sequence: 1})
	if !ok || stored.ID != "shop.order_events/1" || stored.Table != "shop.order_events" {
		t.Errorf("read back as %+v, %v", stored, ok)
	}
	w.fillDeadLetter(ev, sink.StoredID(ev), "dlq", "r", "outbox.order.created", "too large", 1<<20)
	if got := w.msg.Header.Get(contract.HeaderMsgID); got != contract.DeadLetterMsgID("shop.order_events/1") {
		t.Errorf("dead letter's Nats-Msg-Id = %q", got)
	}
	if got := w.msg.Header.Get(contract.HeaderEventID); got != "1" {
		t.Errorf("dead letter's Outbox-Event-Id = %q, want the row's own id 1", got)
	}
	w.fillEvent(&decode.Event{ID: "m-1", Payload: []byte(`{}`)}, "s", "r")
	if got := w.msg.Header.Get(contract.HeaderTable); got != "" {
		t.Errorf("a table-less event kept Outbox-Table %q", got)
	}
	one := &decode.Event{ID: "1", Table: "public.outbox_events", Payload: []byte(`{}`)}
	w.fillEvent(one, "s", "r")
	if got := w.msg.Header.Get(contract.HeaderMsgID); got != "1" {
		t.Errorf("one table: Nats-Msg-Id = %q, want the plain id", got)
	}
}

// TestWireSourceTableOfSeveral: a relay of several tables is stamped with
// all of them, and each message's Outbox-Source-Table names its own
// event's table (a table-less event: the first), so that what the stream
// holds is read back per table (sink.Source.SameTable); a relay of one
// table stamps its table as before.
func TestWireSourceTableOfSeveral(t *testing.T) {
	src := sink.Source{System: "7", Slot: "s", Database: "db", Table: "public.a,shop.b"}
	w := newWireMsg().withSource(sink.NewStamp(src))
	for _, tc := range []struct{ table, want string }{{"shop.b", "shop.b"}, {"public.a", "public.a"}, {"", "public.a"}, {"shop.b", "shop.b"}} {
		ev := &decode.Event{ID: "1", Table: tc.table, QualifyID: true, Payload: []byte(`{}`), Position: decode.Position{CommitLSN: 0x10}}
		w.fillEvent(ev, "s", "r")
		if got := w.msg.Header.Get(contract.HeaderSourceTable); got != tc.want {
			t.Errorf("event of %q: Outbox-Source-Table = %q, want %q", tc.table, got, tc.want)
		}
		stored, ok := ParseStored(&natsjs.RawStreamMsg{Header: w.msg.Header, Sequence: 1})
		if !ok || !src.SameTable(stored.Source) || stored.Source.Table != tc.want {
			t.Errorf("event of %q read back as %+v (%v), not of the relay's tables", tc.table, stored.Source, ok)
		}
	}
	one := newWireMsg().withSource(sink.NewStamp(sink.Source{System: "7", Slot: "s", Database: "db", Table: "public.a"}))
	one.fillEvent(&decode.Event{ID: "1", Table: "public.a", Payload: []byte(`{}`)}, "s", "r")
	if got := one.msg.Header.Get(contract.HeaderSourceTable); got != "public.a" {
		t.Errorf("one table: Outbox-Source-Table = %q", got)
	}
}
