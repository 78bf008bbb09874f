package sink

import "testing"

// TestSourceOfSeveralTables: the source of a relay of several tables names
// them all; each message carries its event's table (a table-less event:
// the first), and the relay's source takes a message of any of its tables
// for its own, not another table's.
func TestSourceOfSeveralTables(t *testing.T) {
	relay := Source{System: "7", Slot: "s", Database: "db", Table: "public.a,shop.b"}
	if !relay.Several() || len(relay.Tables()) != 2 {
		t.Fatalf("Several %v, Tables %v", relay.Several(), relay.Tables())
	}
	for table, want := range map[string]string{"shop.b": "shop.b", "public.a": "public.a", "": "public.a"} {
		got := relay.OfEvent(table)
		if got.Table != want || got.Several() {
			t.Errorf("OfEvent(%q).Table = %q, want %q", table, got.Table, want)
		}
		if !relay.SameTable(got) {
			t.Errorf("a message of %q is not the relay's tables'", want)
		}
	}
	other := relay.OfEvent("shop.b")
	other.Table = "shop.c"
	if relay.SameTable(other) {
		t.Error("a message of another table is taken for the relay's")
	}
	one := Source{System: "7", Slot: "s", Database: "db", Table: "public.a"}
	if got := one.OfEvent("public.a"); got != one {
		t.Errorf("a relay of one table: OfEvent = %+v", got)
	}
	if one.SameTable(relay.OfEvent("shop.b")) || !one.SameTable(relay.OfEvent("public.a")) {
		t.Error("a relay of one table: another relay's messages of its table, and only those, are its table's")
	}
	if (Source{System: "7", Slot: "s"}).OfEvent("public.a").Table != "" {
		t.Error("a source naming no table gained one")
	}
}
