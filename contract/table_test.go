package contract

import "testing"

func TestParseTable(t *testing.T) {
	good := map[string]Table{
		"outbox_events":     {"public", "outbox_events"},
		"app.outbox_events": {"app", "outbox_events"},
		"s1.t_2":            {"s1", "t_2"},
	}
	for in, want := range good {
		got, err := ParseTable(in)
		if err != nil || got != want {
			t.Errorf("ParseTable(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "Outbox", "a.b.c", `x"; drop table y; --`, "public.", ".t", "1abc"} {
		if _, err := ParseTable(bad); err == nil {
			t.Errorf("ParseTable(%q) succeeded, want an error", bad)
		}
	}
}

func TestDefaultTableParses(t *testing.T) {
	if got, err := ParseTable(DefaultTable.String()); err != nil || got != DefaultTable {
		t.Errorf("ParseTable(%q) = %v, %v; want %v", DefaultTable.String(), got, err, DefaultTable)
	}
}
