package decode

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/contract"
)

var outbox = contract.Table{Schema: "public", Name: "outbox_events"}

func decodeAll(t *testing.T, d *Decoder, msgs ...[]byte) []Message {
	t.Helper()
	var out []Message
	for i, m := range msgs {
		got, err := d.Decode(m)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		out = append(out, got)
	}
	return out
}

func TestDecodeTransaction(t *testing.T) {
	d := NewDecoder(outbox)
	msgs := decodeAll(t, d,
		msgBegin(0x1000, 7),
		msgRelation(16384, "public", "outbox_events", seedColumns),
		msgInsert(16384, seedRow("0e4f-1", "order", "42", "order.created", `{"total": 10}`)...),
		msgInsert(16384, seedRow("0e4f-2", "order", "42", "order.paid", `{}`)...),
		msgCommit(0x1000, 0x1030),
	)
	kinds := []Kind{KindBegin, KindSkip, KindEvent, KindEvent, KindCommit}
	for i, k := range kinds {
		if msgs[i].Kind != k {
			t.Fatalf("message %d: kind %d, want %d", i, msgs[i].Kind, k)
		}
	}
	ev := msgs[2].Event
	want := Event{
		ID: "0e4f-1", AggregateType: "order", AggregateID: "42", EventType: "order.created",
		Payload: []byte(`{"total": 10}`), CreatedAt: "2026-12-02T11:36:09.123456Z",
		Position: Position{CommitLSN: 0x1000, Index: 0},
	}
	if ev.ID != want.ID || ev.AggregateType != want.AggregateType || ev.AggregateID != want.AggregateID ||
		ev.EventType != want.EventType || string(ev.Payload) != string(want.Payload) ||
		ev.CreatedAt != want.CreatedAt || ev.Position != want.Position || ev.Problem != "" {
		t.Fatalf("event = %+v\nwant    %+v", ev, want)
	}
	// The commit timestamp comes from BEGIN (123456789 µs after 2000-01-01).
	commitTime := time.Date(2000, 1, 1, 0, 2, 3, 456789000, time.UTC)
	if !msgs[0].CommitTime.Equal(commitTime) || !ev.CommitTime.Equal(commitTime) || !msgs[3].Event.CommitTime.Equal(commitTime) {
		t.Fatalf("commit time: BEGIN %v, events %v %v, want %v", msgs[0].CommitTime, ev.CommitTime, msgs[3].Event.CommitTime, commitTime)
	}
	if got := msgs[3].Event.Position; got != (Position{CommitLSN: 0x1000, Index: 1}) {
		t.Fatalf("second event position = %v", got)
	}
	if c := msgs[4]; c.CommitLSN != 0x1000 || c.EndLSN != 0x1030 {
		t.Fatalf("commit = %+v", c)
	}
	if d.InTransaction() {
		t.Fatal("still in a transaction after COMMIT")
	}
}

func TestDecodeEventOwnsItsMemory(t *testing.T) {
	d := NewDecoder(outbox)
	decodeAll(t, d, msgBegin(0x10, 1), msgRelation(1, "public", "outbox_events", seedColumns))
	buf := msgInsert(1, seedRow("id-1", "order", "42", "created", `{"a":1}`)...)
	m, err := d.Decode(buf)
	if err != nil {
		t.Fatal(err)
	}
	for i := range buf {
		buf[i] = 'X' // the receive buffer is reused by the next message
	}
	if m.Event.ID != "id-1" || string(m.Event.Payload) != `{"a":1}` || m.Event.AggregateType != "order" {
		t.Fatalf("event changed with the buffer: %+v", m.Event)
	}
}

func TestDecodeColumnsByName(t *testing.T) {
	// Same columns in another order, plus an unknown one: mapping is by name.
	cols := []col{{"payload", 25}, {"extra", 23}, {"event_type", 25}, {"id", 25}, {"aggregate_id", 25}, {"aggregate_type", 25}}
	d := NewDecoder(outbox)
	msgs := decodeAll(t, d,
		msgBegin(0x20, 1),
		msgRelation(5, "public", "outbox_events", cols),
		msgInsert(5, str("body"), str("1"), str("shipped"), str("abc"), str("7"), str("parcel")),
		msgCommit(0x20, 0x40),
	)
	ev := msgs[2].Event
	if ev.ID != "abc" || ev.AggregateType != "parcel" || ev.AggregateID != "7" || ev.EventType != "shipped" || string(ev.Payload) != "body" || ev.CreatedAt != "" {
		t.Fatalf("event = %+v", ev)
	}
}

func TestDecodeOtherTablesAndIgnoredChanges(t *testing.T) {
	d := NewDecoder(outbox)
	other := []col{{"id", 23}, {"name", 25}}
	upd := []byte{'U'}
	upd = u32(upd, 1)
	upd = append(upd, 'N')
	trunc := []byte{'T'}
	trunc = u32(trunc, 2)
	trunc = append(trunc, 0)
	trunc = u32(trunc, 2)
	trunc = u32(trunc, 1)
	msgs := decodeAll(t, d,
		msgBegin(0x30, 1),
		msgRelation(1, "public", "outbox_events", seedColumns),
		msgRelation(2, "public", "orders", other),
		msgInsert(2, str("1"), str("x")),
		upd,
		trunc,
		msgCommit(0x30, 0x50),
	)
	if msgs[3].Kind != KindSkip {
		t.Fatalf("insert into another table: kind %d, want skip", msgs[3].Kind)
	}
	if msgs[4].Kind != KindIgnored || msgs[4].Ignored != "UPDATE on public.outbox_events" {
		t.Fatalf("update: %+v", msgs[4])
	}
	if msgs[5].Kind != KindIgnored || msgs[5].Ignored != "TRUNCATE of public.outbox_events" {
		t.Fatalf("truncate: %+v", msgs[5])
	}
}

func TestDecodeProblems(t *testing.T) {
	cases := []struct {
		name    string
		row     []*string
		problem string
	}{
		{"null id", []*string{nil, str("a"), str("b"), str("c"), str("{}"), str("0"), nil, nil}, "id is NULL"},
		{"null payload", []*string{str("1"), str("a"), str("b"), str("c"), nil, str("0"), nil, nil}, "payload is NULL"},
		{"null event type", []*string{str("1"), str("a"), str("b"), nil, str("{}"), str("0"), nil, nil}, "event_type is NULL"},
		{"empty id", []*string{str(""), str("a"), str("b"), str("c"), str("{}"), str("0"), nil, nil}, "id is empty"},
		{"id with newline", []*string{str("1\r\nNats-Msg-Id: 2"), str("a"), str("b"), str("c"), str("{}"), str("0"), nil, nil}, "id contains whitespace"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDecoder(outbox)
			msgs := decodeAll(t, d, msgBegin(0x10, 1), msgRelation(1, "public", "outbox_events", seedColumns), msgInsert(1, tc.row...))
			if p := msgs[2].Event.Problem; !strings.Contains(p, tc.problem) {
				t.Fatalf("problem = %q, want it to contain %q", p, tc.problem)
			}
		})
	}
	t.Run("hostile values that headers can carry are not problems", func(t *testing.T) {
		d := NewDecoder(outbox)
		msgs := decodeAll(t, d, msgBegin(0x10, 1), msgRelation(1, "public", "outbox_events", seedColumns),
			msgInsert(1, seedRow("1", "a.b*>", " ", "\r\n", `{}`)...))
		if p := msgs[2].Event.Problem; p != "" {
			t.Fatalf("problem = %q, want none", p)
		}
	})
}

func TestDecodeByteaPayload(t *testing.T) {
	cols := []col{{"id", 25}, {"aggregate_type", 25}, {"aggregate_id", 25}, {"event_type", 25}, {"payload", oidBytea}}
	d := NewDecoder(outbox)
	msgs := decodeAll(t, d, msgBegin(0x10, 1), msgRelation(1, "public", "outbox_events", cols),
		msgInsert(1, str("1"), str("a"), str("b"), str("c"), str(`\x00ff41`)))
	if got := msgs[2].Event.Payload; string(got) != "\x00\xffA" {
		t.Fatalf("payload = %q", got)
	}
}

func TestDecodeErrors(t *testing.T) {
	rel := msgRelation(1, "public", "outbox_events", seedColumns)
	ins := msgInsert(1, seedRow("1", "a", "b", "c", "{}")...)
	cases := []struct {
		name string
		msgs [][]byte
		want string
	}{
		{"empty message", [][]byte{{}}, "empty message"},
		{"unknown type", [][]byte{{'Z'}}, "unknown message type"},
		{"stream start (protocol 2)", [][]byte{{'S', 0, 0, 0, 1, 1}}, "unknown message type"},
		{"truncated begin", [][]byte{msgBegin(0x10, 1)[:10]}, "truncated"},
		{"trailing bytes", [][]byte{append(msgBegin(0x10, 1), 0)}, "trailing bytes"},
		{"nested begin", [][]byte{msgBegin(0x10, 1), msgBegin(0x20, 2)}, "inside the transaction"},
		{"commit without begin", [][]byte{msgCommit(0x10, 0x20)}, "without BEGIN"},
		{"commit lsn mismatch", [][]byte{msgBegin(0x10, 1), msgCommit(0x11, 0x20)}, "BEGIN announced"},
		{"insert before relation", [][]byte{msgBegin(0x10, 1), ins}, "before its Relation message"},
		{"insert outside transaction", [][]byte{rel, ins}, "outside a transaction"},
		{"column count mismatch", [][]byte{msgBegin(0x10, 1), rel, msgInsert(1, str("1"))}, "has 1 columns"},
		{"missing required column", [][]byte{msgRelation(1, "public", "outbox_events", seedColumns[1:])}, "has no column id"},
		{"duplicate column", [][]byte{msgRelation(1, "public", "outbox_events", append(seedColumns, col{"id", 25}))}, "twice"},
		{"unchanged toast in insert", [][]byte{msgBegin(0x10, 1), rel, func() []byte {
			b := msgInsert(1, seedRow("1", "a", "b", "c", "{}")[:7]...)
			b[7] = 8 // eight columns, the last one 'u'
			return append(b, 'u')
		}()}, "TOAST"},
		{"string without NUL", [][]byte{{'R', 0, 0, 0, 1, 'p', 'u', 'b'}}, "no terminating NUL"},
		{"value longer than message", [][]byte{msgBegin(0x10, 1), rel, func() []byte {
			b := msgInsert(1, seedRow("1", "a", "b", "c", "{}")...)
			return b[:len(b)-12]
		}()}, "truncated"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDecoder(outbox)
			var err error
			for _, m := range tc.msgs {
				if _, err = d.Decode(m); err != nil {
					break
				}
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestFormatTimestamp(t *testing.T) {
	cases := map[string]string{
		"2026-12-02 11:36:09.123456+00": "2026-12-02T11:36:09.123456Z",
		"2026-12-02 11:36:09+00":        "2026-12-02T11:36:09Z",
		"2026-12-02 11:36:09.5":         "2026-12-02T11:36:09.5Z",
		"2026-12-02 13:36:09.5+02":      "2026-12-02T11:36:09.5Z",
		"2026-12-02 17:06:09+05:30":     "2026-12-02T11:36:09Z",
		"infinity":                      "infinity",
		"0044-03-15 12:00:00+00 BC":     "0044-03-15 12:00:00+00 BC",
	}
	for in, want := range cases {
		if got := string(formatTimestamp([]byte(in))); got != want {
			t.Errorf("formatTimestamp(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPositionOrder(t *testing.T) {
	ps := []Position{{0, 0}, {0, 5}, {pglogrepl.LSN(0x10), 0}, {pglogrepl.LSN(0x10), 1}, {pglogrepl.LSN(0x11), 0}}
	for i := 0; i+1 < len(ps); i++ {
		if !ps[i].Less(ps[i+1]) || ps[i+1].Less(ps[i]) {
			t.Errorf("%v should come before %v", ps[i], ps[i+1])
		}
	}
}

// TestCapturedStream decodes bytes captured from Postgres 15 (written by
// replication's TestRealPgoutputBytes -update): four events, three ignored
// changes, an insert into another table, a rolled-back transaction absent.
func TestCapturedStream(t *testing.T) {
	streams := capturedStreams(t)
	if len(streams) == 0 {
		t.Fatal("no captured streams in testdata/captured")
	}
	for _, msgs := range streams {
		d := NewDecoder(outbox)
		var events []Event
		var ignored, commits int
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
			}
		}
		if len(events) != 4 || ignored != 3 || commits != 6 {
			t.Fatalf("decoded %d events, %d ignored changes, %d commits; want 4, 3, 6", len(events), ignored, commits)
		}
		if events[0].ID != "11111111-1111-1111-1111-111111111111" || events[0].CreatedAt != "2026-12-02T11:36:09.123456Z" ||
			string(events[0].Payload) != `{"b": [1, 2], "total": 10}` {
			t.Errorf("first event %+v", events[0])
		}
		if events[2].EventType != "order.shipped" || string(events[2].Payload) != `{"x": "é"}` || events[2].Position.Index != 1 {
			t.Errorf("third event %+v", events[2])
		}
		for _, e := range events {
			if e.EventType == "rolled.back" {
				t.Error("a rolled-back insert was decoded")
			}
		}
	}
}
