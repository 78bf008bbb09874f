package contract

import (
	"slices"
	"testing"
)

func TestParseTables(t *testing.T) {
	got, err := ParseTables("a, shop.b", "c")
	want := []Table{{"public", "a"}, {"shop", "b"}, {"public", "c"}}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("ParseTables = %v, %v; want %v", got, err, want)
	}
	if s := JoinTables(got); s != "public.a,shop.b,public.c" {
		t.Errorf("JoinTables = %q", s)
	}
	for _, bad := range [][]string{nil, {""}, {"a,"}, {"a", "public.a"}, {"a,Bad"}} {
		if _, err := ParseTables(bad...); err == nil {
			t.Errorf("ParseTables(%q) succeeded, want an error", bad)
		}
	}
}

// TestQualifiedID: a qualified id splits back into its table and id at
// the first separator, whatever the id holds.
func TestQualifiedID(t *testing.T) {
	for _, id := range []string{"42", "a/b", "", "shop.x/1"} {
		qid := QualifiedID("shop.order_events", id)
		table, got, ok := SplitQualifiedID(qid)
		if !ok || table != (Table{"shop", "order_events"}) || got != id {
			t.Errorf("SplitQualifiedID(%q) = %v, %q, %v", qid, table, got, ok)
		}
	}
	for _, bad := range []string{"42", "Shop.x/1", "nodot/1"} {
		if _, _, ok := SplitQualifiedID(bad); ok {
			t.Errorf("SplitQualifiedID(%q) split", bad)
		}
	}
}
