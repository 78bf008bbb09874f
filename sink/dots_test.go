package sink

import (
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
)

func TestDottedTokens(t *testing.T) {
	nine := "a.b.c.d.e.f.g.h.i"
	eight := "a.b.c.d.e.f.g.h"
	cases := []struct{ in, want string }{
		{"order.created", "order.created"},
		{"order", "order"},
		{"Order_2-b.v1", "Order_2-b.v1"},
		{eight, eight},
		{nine, "a%2Eb%2Ec%2Ed%2Ee%2Ef%2Eg%2Eh%2Ei"},
		{"", "_"},
		{".", "%2E"},
		{"a..b", "a%2E%2Eb"},
		{".a", "%2Ea"},
		{"a.", "a%2E"},
		{"order.*", "order.%2A"},
		{"order.>", "order.%3E"},
		{"*.>", "%2A.%3E"},
		{"a b.c\td", "a%20b.c%09d"},
		{"a.\x00", "a.%00"},
		{"é.x", "%C3%A9.x"},
		{"$JS.API.STREAM", "%24JS.API.STREAM"},
		{"a. .b", "a.%20.b"},
	}
	for _, c := range cases {
		if got := DottedTokens(c.in); got != c.want {
			t.Errorf("DottedTokens(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	long := strings.Repeat("x", 500) + "." + strings.Repeat("y", 500)
	got := strings.Split(DottedTokens(long), ".")
	if len(got) != 2 || len(got[0]) > maxTokenLen || len(got[1]) > maxTokenLen {
		t.Errorf("DottedTokens(long.long) = %q", got)
	}
}

func TestTemplateDots(t *testing.T) {
	cases := []struct {
		template, filter, subject string
	}{
		{"outbox.{aggregate_type}.{event_type}", "outbox.*.>", "outbox.order.order.created"},
		{"outbox.v1.{event_type}", "outbox.v1.>", "outbox.v1.order.created"},
		{"events.{aggregate_type}.{aggregate_id}.x", "events.*.*.>", "events.order.42.x"},
		{"events.{event_type}.tail", "events.*.>", "events.order.created.tail"},
		{"fixed.subject", "fixed.subject", "fixed.subject"},
	}
	ev := &decode.Event{AggregateType: "order", AggregateID: "42", EventType: "order.created"}
	for _, c := range cases {
		tpl, err := ParseTemplate(c.template, WithDots(DotsTokens))
		if err != nil {
			t.Fatal(err)
		}
		if got := tpl.Filter(); got != c.filter {
			t.Errorf("%s: Filter = %q, want %q", c.template, got, c.filter)
		}
		if got := tpl.Render(ev); got != c.subject {
			t.Errorf("%s: Render = %q, want %q", c.template, got, c.subject)
		}
		if !Covers(tpl.Filter(), tpl.Render(ev)) {
			t.Errorf("%s: filter %q does not cover %q", c.template, tpl.Filter(), tpl.Render(ev))
		}
	}
	// The fixed prefix stays fixed whatever the values.
	tpl, _ := ParseTemplate(contract.DefaultSubject, WithDots(DotsTokens))
	for _, v := range []string{"", ".", ">", "*", "a..b", strings.Repeat("a.", 20), "$JS.API"} {
		s := tpl.Render(&decode.Event{AggregateType: v, EventType: v})
		if !strings.HasPrefix(s, "outbox.") || !Covers(tpl.Filter(), s) || strings.Contains(s, "..") {
			t.Errorf("Render(%q) = %q", v, s)
		}
	}
	if d, err := ParseDots("tokens"); err != nil || d != DotsTokens || d.String() != "tokens" {
		t.Errorf("ParseDots(tokens) = %v, %v", d, err)
	}
	if d, err := ParseDots("escape"); err != nil || d != DotsEscape || d.String() != "escape" {
		t.Errorf("ParseDots(escape) = %v, %v", d, err)
	}
	if _, err := ParseDots("split"); err == nil {
		t.Error("ParseDots(split) accepted")
	}
}

// FuzzDottedTokens: whatever the values, a tokens template renders a
// subject under its fixed prefix, covered by its filter, with non-empty,
// bounded tokens free of wildcards and whitespace, at most
// MaxDottedTokens per value.
func FuzzDottedTokens(f *testing.F) {
	for _, s := range []string{"", "a.b", "*", ">", " ", ".", "a..b", ".a.", "a.b.c.d.e.f.g.h.i", strings.Repeat("é.", 30), "\x00\xff"} {
		f.Add(s, s)
	}
	tpl, err := ParseTemplate(contract.DefaultSubject, WithDots(DotsTokens))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, aggType, evType string) {
		d := DottedTokens(evType)
		toks := strings.Split(d, ".")
		if len(toks) > MaxDottedTokens {
			t.Fatalf("DottedTokens(%q) = %q: %d tokens", evType, d, len(toks))
		}
		for _, tok := range toks {
			if tok == "" || len(tok) > maxTokenLen || strings.ContainsAny(tok, "*> \t\r\n\x00") {
				t.Fatalf("DottedTokens(%q) = %q: bad token %q", evType, d, tok)
			}
		}
		s := tpl.Render(&decode.Event{AggregateType: aggType, EventType: evType})
		if !strings.HasPrefix(s, "outbox.") || !Covers(tpl.Filter(), s) || !strings.HasSuffix(s, "."+d) {
			t.Fatalf("Render(%q, %q) = %q, filter %q", aggType, evType, s, tpl.Filter())
		}
	})
}
