package decode

import (
	"strings"
	"testing"
)

// TestDecodeMessages: messages with the prefix become events numbered with
// the inserts of their transaction, in WAL order; other prefixes are
// skipped, non-transactional messages ignored, and without the option
// every message is skipped.
func TestDecodeMessages(t *testing.T) {
	rel := msgRelation(16384, "public", "outbox_events", seedColumns)
	stream := [][]byte{
		msgBegin(0x1000, 7),
		rel,
		msgInsert(16384, seedRow("row-1", "order", "42", "order.created", `{}`)...),
		msgMessage(true, 0xf00, "outbox", envelope("msg-1", "order.paid", `{"total": 10, "x": [1, 2]}`)),
		msgMessage(true, 0xf10, "other", `not json`),
		msgMessage(true, 0xf20, "outbox", envelope("msg-2", "order.shipped", `null`)),
		msgCommit(0x1000, 0x1030),
		msgMessage(false, 0x1040, "outbox", envelope("msg-3", "order.lost", `{}`)),
		msgBegin(0x2000, 8),
		msgMessage(true, 0x1f00, "outbox", envelope("msg-4", "only.message", `{}`)),
		msgCommit(0x2000, 0x2030),
	}
	msgs := decodeAll(t, NewDecoder(outbox, WithMessagePrefix("outbox")), stream...)
	kinds := []Kind{KindBegin, KindSkip, KindEvent, KindEvent, KindSkip, KindEvent, KindCommit, KindIgnored, KindBegin, KindEvent, KindCommit}
	for i, k := range kinds {
		if msgs[i].Kind != k {
			t.Fatalf("message %d: kind %d, want %d", i, msgs[i].Kind, k)
		}
	}
	want := []struct {
		msg       int
		id, typ   string
		payload   string
		pos       Position
		createdAt string
	}{
		{2, "row-1", "order.created", `{}`, Position{0x1000, 0}, "2026-12-02T11:36:09.123456Z"},
		{3, "msg-1", "order.paid", `{"total": 10, "x": [1, 2]}`, Position{0x1000, 1}, "2026-12-03T12:01:02.5Z"},
		{5, "msg-2", "order.shipped", `null`, Position{0x1000, 2}, "2026-12-03T12:01:02.5Z"},
		{9, "msg-4", "only.message", `{}`, Position{0x2000, 0}, "2026-12-03T12:01:02.5Z"},
	}
	for _, w := range want {
		ev := msgs[w.msg].Event
		if ev.ID != w.id || ev.EventType != w.typ || string(ev.Payload) != w.payload || ev.Position != w.pos ||
			ev.CreatedAt != w.createdAt || ev.AggregateType != "order" || ev.AggregateID != "42" || ev.Problem != "" {
			t.Errorf("message %d: event %+v (payload %s), want %s %s %s at %v", w.msg, ev, ev.Payload, w.id, w.typ, w.payload, w.pos)
		}
	}
	if !strings.Contains(msgs[7].Ignored, "non-transactional") {
		t.Errorf("non-transactional message: %q", msgs[7].Ignored)
	}
	for i, m := range decodeAll(t, NewDecoder(outbox), stream...) {
		if m.Kind != KindSkip && m.Kind != kinds[i] || m.Kind == KindEvent && m.Event.ID != "row-1" {
			t.Errorf("without a prefix, message %d: kind %d (%s)", i, m.Kind, m.Event.ID)
		}
	}
}

// TestDecodeHostileMessages: content under the prefix that is not a valid
// envelope becomes an event with a Problem (a dead letter), keeping the id
// when there is one and the raw content when there is no payload; a
// message that breaks the protocol is an error.
func TestDecodeHostileMessages(t *testing.T) {
	cases := []struct {
		content, id, payload, problem string
	}{
		{`not json`, "", `not json`, "not a JSON object"},
		{`null`, "", `null`, "not a JSON object"},
		{`[1]`, "", `[1]`, "not a JSON object"},
		{`{"id": "a1", "aggregate_type": "o", "aggregate_id": "1", "payload": {}}`, "a1", `{}`, "event_type is missing"},
		{`{"id": "a2", "aggregate_type": "o", "aggregate_id": "1", "event_type": 5, "payload": {}}`, "a2", `{}`, "event_type is missing or not a string"},
		{`{"id": "a3", "aggregate_type": "o", "aggregate_id": "1", "event_type": "e"}`, "a3", `{"id": "a3", "aggregate_type": "o", "aggregate_id": "1", "event_type": "e"}`, "payload is missing"},
		{`{"id": "a 4", "aggregate_type": "o", "aggregate_id": "1", "event_type": "e", "payload": 1}`, "a 4", `1`, "whitespace"},
		{`{"id": "a5", "aggregate_type": "o", "aggregate_id": "1", "event_type": "e", "payload": 1, "created_at": "yesterday"}`, "a5", `1`, "created_at"},
		{`{"id": "a6", "aggregate_type": "o", "aggregate_id": "1", "event_type": "e", "payload": 1, "created_at": null}`, "a6", `1`, ""},
		{`{"id": null, "aggregate_type": "o", "aggregate_id": "1", "event_type": "e", "payload": 1}`, "", `1`, "id is missing"},
	}
	for _, c := range cases {
		msgs := decodeAll(t, NewDecoder(outbox, WithMessagePrefix("outbox")), msgBegin(0x10, 1), msgMessage(true, 0x8, "outbox", c.content))
		ev := msgs[1].Event
		if msgs[1].Kind != KindEvent || ev.ID != c.id || string(ev.Payload) != c.payload || !strings.Contains(ev.Problem, c.problem) || c.problem == "" && ev.Problem != "" {
			t.Errorf("%s: event %+v (payload %s), want id %q, payload %s, problem containing %q", c.content, ev, ev.Payload, c.id, c.payload, c.problem)
		}
	}
	good := msgMessage(true, 0x8, "outbox", envelope("x", "e", "{}"))
	bad := map[string][]byte{
		"outside a transaction": good,
		"truncated":             good[:len(good)-1],
		"trailing bytes":        append(append([]byte(nil), good...), 0),
		"no NUL after prefix":   []byte{'M', 1, 0, 0, 0, 0, 0, 0, 0, 8, 'o', 'u'},
		"length beyond the end": append(append([]byte{'M', 1}, make([]byte, 8)...), 'o', 0, 0xff, 0xff, 0xff, 0xff),
	}
	for name, m := range bad {
		d := NewDecoder(outbox, WithMessagePrefix("outbox"))
		if name != "outside a transaction" {
			decodeAll(t, d, msgBegin(0x10, 1))
		}
		if _, err := d.Decode(m); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestCapturedMessages decodes bytes captured from Postgres 15 with the
// messages option (written by replication's TestRealPgoutputMessages
// -update): a transaction of a row, two messages and a row numbered 0 to 3
// in that order, a rolled-back message absent, another prefix skipped, a
// non-transactional message ignored, a message-only transaction, and
// content that is not JSON kept whole as a dead letter.
func TestCapturedMessages(t *testing.T) {
	streams := capturedIn(t, "messages")
	if len(streams) == 0 {
		t.Fatal("no captured streams in testdata/messages")
	}
	for _, msgs := range streams {
		d := NewDecoder(outbox, WithMessagePrefix("outbox"))
		var events []Event
		var ignored, commits, skipped int
		for i, m := range msgs {
			got, err := d.Decode(m)
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
			switch got.Kind {
			case KindEvent:
				events = append(events, got.Event)
			case KindIgnored:
				ignored++
			case KindCommit:
				commits++
			case KindSkip:
				if m[0] == 'M' {
					skipped++
				}
			}
		}
		if len(events) != 6 || ignored != 1 || commits != 4 || skipped != 1 {
			t.Fatalf("decoded %d events, %d ignored, %d commits, %d skipped messages; want 6, 1, 4, 1", len(events), ignored, commits, skipped)
		}
		types := []string{"order.created", "order.paid", "order.shipped", "order.closed", "only.messages", ""}
		for i, e := range events {
			if e.EventType != types[i] || (i < 5) != (e.Problem == "") {
				t.Errorf("event %d: %s, problem %q; want %s", i, e.EventType, e.Problem, types[i])
			}
			if i < 4 && (e.Position.Index != uint32(i) || e.Position.CommitLSN != events[0].Position.CommitLSN) {
				t.Errorf("event %d at %v", i, e.Position)
			}
		}
		if m := events[1]; string(m.Payload) != `{"b": [1, 2], "total": 10}` || !strings.HasSuffix(m.CreatedAt, "Z") || m.AggregateID != "1" {
			t.Errorf("emitted event %+v (payload %s)", m, m.Payload)
		}
		if string(events[5].Payload) != "not json" {
			t.Errorf("hostile content kept as %q", events[5].Payload)
		}
	}
}
