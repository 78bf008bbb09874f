package decode

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/contract"
)

// TestDecodeSeveralTables: one Decoder reports the inserts of every table
// it was given, each event naming its table, in one sequence of positions
// per transaction; equal ids of two tables give two message ids; a table
// it was not given is skipped.
func TestDecodeSeveralTables(t *testing.T) {
	shop := contract.Table{Schema: "shop", Name: "order_events"}
	d := NewDecoder(outbox, WithTables(shop))
	msgs := decodeAll(t, d,
		msgBegin(0x2000, 9),
		msgRelation(1, "public", "outbox_events", seedColumns),
		msgRelation(2, "shop", "order_events", seedColumns),
		msgRelation(3, "shop", "audit", seedColumns),
		msgInsert(2, seedRow("1", "order", "7", "order.created", `{}`)...),
		msgInsert(3, seedRow("1", "order", "7", "audited", `{}`)...),
		msgInsert(1, seedRow("1", "user", "3", "user.created", `{}`)...),
		msgInsert(2, seedRow("2", "order", "7", "order.paid", `{}`)...),
		msgCommit(0x2000, 0x2040),
	)
	var got []Event
	for _, m := range msgs {
		if m.Kind == KindEvent {
			got = append(got, m.Event)
		}
	}
	want := []struct {
		table, msgID string
		index        uint32
	}{
		{"shop.order_events", "shop.order_events/1", 0},
		{"public.outbox_events", "public.outbox_events/1", 1},
		{"shop.order_events", "shop.order_events/2", 2},
	}
	if len(got) != len(want) {
		t.Fatalf("decoded %d events, want %d (the table not given is skipped): %+v", len(got), len(want), got)
	}
	for i, w := range want {
		ev := got[i]
		if ev.Table != w.table || ev.MsgID() != w.msgID || ev.Position.Index != w.index || ev.Position.CommitLSN != 0x2000 {
			t.Errorf("event %d: table %q, msg id %q, position %v; want %q, %q, index %d", i, ev.Table, ev.MsgID(), ev.Position, w.table, w.msgID, w.index)
		}
	}
}

// TestDecodeOneTableKeepsPlainIDs: with one table, events name it but keep
// their plain id in the stream, as before several tables existed.
func TestDecodeOneTableKeepsPlainIDs(t *testing.T) {
	d := NewDecoder(outbox)
	msgs := decodeAll(t, d,
		msgBegin(0x10, 1),
		msgRelation(1, "public", "outbox_events", seedColumns),
		msgInsert(1, seedRow("42", "order", "7", "order.created", `{}`)...),
		msgCommit(0x10, 0x40),
	)
	ev := msgs[2].Event
	if ev.Table != "public.outbox_events" || ev.MsgID() != "42" {
		t.Fatalf("table %q, msg id %q; want public.outbox_events and 42", ev.Table, ev.MsgID())
	}
}
