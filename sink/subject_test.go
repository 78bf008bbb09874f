package sink

import (
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/decode"
)

func TestEscapeToken(t *testing.T) {
	long := strings.Repeat("x", 5000)
	cases := map[string]string{
		"order":           "order",
		"Order_2-b":       "Order_2-b",
		"order.created":   "order%2Ecreated",
		"*":               "%2A",
		">":               "%3E",
		"a b":             "a%20b",
		"\t":              "%09",
		"":                "_",
		"100%":            "100%25",
		"é":               "%C3%A9",
		"$JS.API.STREAM.": "%24JS%2EAPI%2ESTREAM%2E",
	}
	for in, want := range cases {
		if got := EscapeToken(in); got != want {
			t.Errorf("EscapeToken(%q) = %q, want %q", in, got, want)
		}
	}
	got := EscapeToken(long)
	if len(got) > maxTokenLen || !strings.HasPrefix(got, strings.Repeat("x", keptTokenLen)+"~") {
		t.Errorf("EscapeToken(5000 x) = %q (%d bytes)", got, len(got))
	}
	if EscapeToken(long) == EscapeToken(long+"y") {
		t.Error("long values that differ after the cut render the same token")
	}
	// A cut never splits an escape.
	esc := EscapeToken(strings.Repeat("a.", 40))
	if i := strings.IndexByte(esc, '~'); i < 0 || strings.Count(esc[:i], "%")*3 > i || strings.HasSuffix(esc[:i], "%") || strings.HasSuffix(esc[:i-1], "%") {
		t.Errorf("cut escape: %q", esc)
	}
}

// FuzzEscapeToken: whatever the value, the token is one valid, non-empty,
// bounded subject token.
func FuzzEscapeToken(f *testing.F) {
	for _, s := range []string{"", "a.b", "*", ">", " ", strings.Repeat("é", 100), "\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		tok := EscapeToken(v)
		if tok == "" || len(tok) > maxTokenLen || strings.ContainsAny(tok, ".*> \t\r\n\x00") {
			t.Fatalf("EscapeToken(%q) = %q", v, tok)
		}
	})
}

func TestTemplate(t *testing.T) {
	tpl, err := ParseTemplate("outbox.{aggregate_type}.{event_type}")
	if err != nil {
		t.Fatal(err)
	}
	if f := tpl.Filter(); f != "outbox.*.*" {
		t.Errorf("Filter = %q", f)
	}
	ev := &decode.Event{AggregateType: "order", AggregateID: "42", EventType: "order.created"}
	if s := tpl.Render(ev); s != "outbox.order.order%2Ecreated" {
		t.Errorf("Render = %q", s)
	}
	tpl2, err := ParseTemplate("events.v1.{aggregate_type}.{aggregate_id}.x")
	if err != nil {
		t.Fatal(err)
	}
	if s := tpl2.Render(ev); s != "events.v1.order.42.x" {
		t.Errorf("Render = %q", s)
	}
	for _, bad := range []string{"{event_type}", "{event_type}.x", "a..b", "a.*", "a.>", "a.{unknown}", "a.b{event_type}", "a b.c", ""} {
		if _, err := ParseTemplate(bad); err == nil {
			t.Errorf("ParseTemplate(%q) accepted", bad)
		}
	}
}

func TestCovers(t *testing.T) {
	cases := []struct {
		filter, pattern string
		want            bool
	}{
		{"outbox.>", "outbox.*.*", true},
		{"outbox.*.*", "outbox.*.*", true},
		{"outbox.*.>", "outbox.*.*", true},
		{">", "outbox.*.*", true},
		{"outbox.*", "outbox.*.*", false},
		{"outbox.order.*", "outbox.*.*", false},
		{"orders.>", "outbox.*.*", false},
		{"outbox.*.*.*", "outbox.*.*", false},
		{"outbox.>", "outbox", false},
		{"outbox_dead_letter", "outbox_dead_letter", true},
		// Patterns of templates whose placeholders span several tokens.
		{"outbox.>", "outbox.*.>", true},
		{">", "outbox.*.>", true},
		{"outbox.*.>", "outbox.*.>", true},
		{"outbox.*.*", "outbox.*.>", false},
		{"outbox.*.*.>", "outbox.*.>", false},
		{"outbox.order.>", "outbox.*.>", false},
		{"outbox.*", "outbox.*.>", false},
		{"outbox.*.>", "outbox.*.*", true},
		{"outbox.*.>", "outbox.order.order.created", true},
		{"outbox.*.*", "outbox.order.order.created", false},
	}
	for _, c := range cases {
		if got := Covers(c.filter, c.pattern); got != c.want {
			t.Errorf("Covers(%q, %q) = %v, want %v", c.filter, c.pattern, got, c.want)
		}
	}
}

// TestTemplateTable: {schema} and {table} render the event's table, each
// as one token escaped like any value (a value never changes the
// subject's shape, also in the dotted mode); a table-less event renders
// them as "_".
func TestTemplateTable(t *testing.T) {
	for _, dots := range []Dots{DotsEscape, DotsTokens} {
		tpl, err := ParseTemplate("outbox.{schema}.{table}.{event_type}", WithDots(dots))
		if err != nil {
			t.Fatal(err)
		}
		cases := map[string]string{
			"shop.order_events":  "outbox.shop.order_events.created",
			"":                   "outbox._._.created",
			"a b.c*d.e>":         "outbox.a%20b.c%2Ad%2Ee%3E.created",
			"public.outbox_even": "outbox.public.outbox_even.created",
		}
		for table, want := range cases {
			ev := &decode.Event{Table: table, EventType: "created"}
			got := tpl.Render(ev)
			if dots == DotsTokens && table == "a b.c*d.e>" {
				want = "outbox.a%20b.c%2Ad.e%3E.created" // the table's value splits at its dots, as any value does
			}
			if got != want {
				t.Errorf("dots %s, table %q: Render = %q, want %q", dots, table, got, want)
			}
		}
	}
	tpl, err := ParseTemplate("outbox.{schema}.{table}.{event_type}")
	if err != nil {
		t.Fatal(err)
	}
	if f := tpl.Filter(); f != "outbox.*.*.*" {
		t.Errorf("Filter = %q", f)
	}
	if _, err := ParseTemplate("{table}.x"); err == nil {
		t.Error("a template starting with {table} was accepted")
	}
}
