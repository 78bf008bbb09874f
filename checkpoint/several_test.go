package checkpoint

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/sink"
)

// TestTableHoldingsOfSeveralTables: the holdings of a relay of several
// tables are per table: a row's event is held when the stream holds a
// message of its own table with its id, stored qualified by a relay of
// several tables or plain by a relay of one (a table added to a relay),
// whatever slot published it; the same id in another of the relay's
// tables, or in a table the relay does not read, is not its event. A relay
// of one table finds its events stored qualified by a relay of several.
func TestTableHoldingsOfSeveralTables(t *testing.T) {
	several := tableSource
	several.Table = "public.outbox_events,shop.outbox_events"
	msg := func(id, table string) sink.StoredEvent {
		src := tableSource
		src.Table, src.Slot = table, "another_slot"
		return sink.StoredEvent{ID: id, Table: table, Source: src}
	}
	msgs := []sink.StoredEvent{
		msg("public.outbox_events/1", "public.outbox_events"), // a relay of several
		msg("2", "shop.outbox_events"),                        // a relay of shop's table alone
		msg("3", "public.other"),                              // a table the relay does not read
		msg("public.other/4", "public.other"),
	}
	r := &scanReader{owner: several, n: len(msgs), ev: func(i int) (sink.StoredEvent, bool) { return msgs[i], true }}
	h, err := ReadTableHoldings(context.Background(), r, time.Time{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ev := func(table, id string) *decode.Event { return &decode.Event{ID: id, Table: table, QualifyID: true} }
	for _, tc := range []struct {
		ev   *decode.Event
		held bool
	}{
		{ev("public.outbox_events", "1"), true},
		{ev("shop.outbox_events", "1"), false},
		{ev("shop.outbox_events", "2"), true},
		{ev("public.outbox_events", "2"), false},
		{ev("public.outbox_events", "3"), false},
		{ev("public.outbox_events", "4"), false},
	} {
		if got := h.Holds(tc.ev); got != tc.held {
			t.Errorf("%s: held %v, want %v", tc.ev.MsgID(), got, tc.held)
		}
	}

	one := &scanReader{owner: tableSource, n: len(msgs), ev: func(i int) (sink.StoredEvent, bool) { return msgs[i], true }}
	if h, err = ReadTableHoldings(context.Background(), one, time.Time{}, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	if !h.Holds(&decode.Event{ID: "1", Table: "public.outbox_events"}) {
		t.Error("a relay of one table does not find its event stored qualified by a relay of several")
	}
	if h.Holds(&decode.Event{ID: "2", Table: "public.outbox_events"}) {
		t.Error("a relay of one table holds another table's event")
	}
}

// TestSlotTablesRecord: the slot's record of a relay of several tables
// lists them all, sorted, so that another slot's record serves each of
// its tables, and only those, whatever order --table gave them in.
func TestSlotTablesRecord(t *testing.T) {
	a, b, c := contract.Table{Schema: "public", Name: "a"}, contract.Table{Schema: "shop", Name: "b"}, contract.Table{Schema: "public", Name: "c"}
	if got := SlotTables([]contract.Table{b, a}); got != "public.a,shop.b" {
		t.Errorf("SlotTables = %q", got)
	}
	if got := SlotTables([]contract.Table{a}); got != "public.a" {
		t.Errorf("SlotTables of one = %q, want the table's name", got)
	}
	o := OtherSlot{Slot: "s", Table: SlotTables([]contract.Table{b, a})}
	if !o.Serves(a) || !o.Serves(b) || o.Serves(c) {
		t.Errorf("record %q: serves a %v, b %v, c %v", o.Table, o.Serves(a), o.Serves(b), o.Serves(c))
	}
	if got, ok := o.ServesAny([]contract.Table{c, b}); !ok || got != b {
		t.Errorf("ServesAny = %v, %v; want %v", got, ok, b)
	}
	if (OtherSlot{Slot: "old"}).Serves(a) {
		t.Error("a record without a table serves a table")
	}
}
