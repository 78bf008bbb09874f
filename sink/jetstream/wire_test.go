package jetstream

import (
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/sink"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
)

func TestParseReply(t *testing.T) {
	msg := func(data string, hdr nats.Header) *nats.Msg { return &nats.Msg{Data: []byte(data), Header: hdr} }
	cases := []struct {
		name string
		m    *nats.Msg
		seq  uint64
		dup  bool
		err  string
	}{
		{"ack", msg(`{"stream":"OUTBOX","seq":42}`, nil), 42, false, ""},
		{"ack with domain", msg(`{"stream":"OUTBOX","domain":"hub","seq":7}`, nil), 7, false, ""},
		{"duplicate", msg(`{"stream":"OUTBOX","seq":42,"duplicate": true}`, nil), 42, true, ""},
		{"store error", msg(`{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"OUTBOX","seq":0}`, nil), 0, false, "maximum messages exceeded"},
		{"too large", msg(`{"error":{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"}}`, nil), 0, false, "message size exceeds"},
		{"no responders", msg("", nats.Header{"Status": []string{"503"}}), 0, false, "no responders"},
		{"garbage", msg("nope", nil), 0, false, "not a JetStream PubAck"},
		{"no stream", msg(`{"seq":1}`, nil), 0, false, "not a JetStream PubAck"},
	}
	for _, c := range cases {
		r := parseReply(c.m)
		if c.err != "" {
			if r.err == nil || !strings.Contains(r.err.Error(), c.err) {
				t.Errorf("%s: err = %v, want %q", c.name, r.err, c.err)
			}
			continue
		}
		if r.err != nil || r.streamSeq != c.seq || r.duplicate != c.dup {
			t.Errorf("%s: %+v, want seq %d dup %v", c.name, r, c.seq, c.dup)
		}
	}
	if !Permanent(parseReply(msg(`{"error":{"code":400,"err_code":10054,"description":"x"}}`, nil)).err) {
		t.Error("message-too-large is not permanent")
	}
	if Permanent(parseReply(msg(`{"error":{"code":503,"err_code":10077,"description":"x"}}`, nil)).err) {
		t.Error("a full stream is permanent: it must be retried")
	}
}

func TestParseReplySubject(t *testing.T) {
	if seq, att, ok := parseReplySubject("123.4"); !ok || seq != 123 || att != 4 {
		t.Errorf("parse 123.4 = %d %d %v", seq, att, ok)
	}
	for _, bad := range []string{"", "1", "1.", ".1", "a.1", "1.2.3", "99999999999999999999.1", "1.99999999999"} {
		if _, _, ok := parseReplySubject(bad); ok {
			t.Errorf("parseReplySubject(%q) accepted", bad)
		}
	}
}

func TestWireMessage(t *testing.T) {
	w := newWireMsg()
	ev := &decode.Event{ID: "id-1", AggregateType: "order", AggregateID: " 42", EventType: "a\r\nNats-Msg-Id: x",
		CreatedAt: "2026-12-02T11:36:09.5Z", Payload: []byte(`{}`), Position: decode.Position{CommitLSN: 0x16B374D848, Index: 3}}
	w.fillEvent(ev, "outbox.order.x", "_INBOX.r.1.1")
	h := w.msg.Header
	want := map[string]string{
		contract.HeaderMsgID: "id-1", contract.HeaderAggregateType: "order", contract.HeaderAggregateID: "%2042", contract.HeaderEventType: "a%0D%0ANats-Msg-Id:%20x",
		contract.HeaderCreatedAt: "2026-12-02T11:36:09.5Z", contract.HeaderCommitLSN: "16/B374D848", contract.HeaderTxnIndex: "3",
		contract.HeaderPercentEncoded: "Outbox-Aggregate-Id,Outbox-Event-Type",
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	// The message is reused: the next event leaves nothing of this one.
	w.fillEvent(&decode.Event{ID: "id-2", Payload: []byte(`{}`)}, "s", "r")
	if h := w.msg.Header; h.Get(contract.HeaderPercentEncoded) != "" || h.Get(contract.HeaderCreatedAt) != "" || h.Get(contract.HeaderMsgID) != "id-2" {
		t.Errorf("reused message kept old headers: %v", h)
	}
	if headerSize(w.msg.Header) <= 12 {
		t.Error("headerSize too small")
	}
}

func TestDeadLetterMessage(t *testing.T) {
	w := newWireMsg()
	big := &decode.Event{ID: "id-9", AggregateType: "a", AggregateID: "b", EventType: "c", Payload: make([]byte, 2000)}
	w.fillDeadLetter(big, "id-9", "dlq", "r", "outbox.a.c", "too large", 1000)
	h := w.msg.Header
	if h.Get(contract.HeaderMsgID) != contract.DeadLetterMsgIDPrefix+"id-9" || h.Get(contract.HeaderDeadLetterReason) != "too large" || h.Get(contract.HeaderOriginalSubject) != "outbox.a.c" {
		t.Errorf("headers %v", h)
	}
	if len(w.msg.Data) != 0 || h.Get(contract.HeaderPayloadOmitted) == "" {
		t.Error("a payload over the limit went into the dead letter")
	}
	w.fillDeadLetter(&decode.Event{Problem: "id is NULL", Payload: []byte(`{}`), Position: decode.Position{CommitLSN: 0x10, Index: 2}}, "0/10#2", "dlq", "r", "s", "id is NULL", 1000)
	if got := w.msg.Header.Get(contract.HeaderMsgID); got != contract.DeadLetterMsgIDPrefix+"0/10#2" || string(w.msg.Data) != `{}` {
		t.Errorf("dead letter without id: Nats-Msg-Id %q, data %q", got, w.msg.Data)
	}
}

// TestDeadLetterID: a dead letter is stored under the event's id; one a
// Nats-Msg-Id cannot carry is replaced by the WAL position, and for an
// event read from the table (commit LSN 0, whose index restarts with every
// batch or run) by the position, the publisher's instance and its
// sequence number: two publishers, or two batches of one, never store two
// dead letters under one id. The row's id goes along in Outbox-Event-Id,
// and ParseStored reads it back as the row holds it.
func TestDeadLetterID(t *testing.T) {
	p, q := &Publisher{instance: newInstance()}, &Publisher{instance: newInstance()}
	wal := decode.Position{CommitLSN: 0x16B3748, Index: 2}
	table := decode.Position{Index: 2}
	for _, c := range []struct {
		ev   decode.Event
		want string
	}{
		{decode.Event{ID: "id-9", Position: wal}, "id-9"},
		{decode.Event{ID: "id-9", Position: table}, "id-9"},
		{decode.Event{ID: "order 42", Position: wal}, "0/16B3748#2"},
		{decode.Event{ID: "", Position: wal}, "0/16B3748#2"},
		{decode.Event{ID: "order 42", Position: table}, "0/0#2@" + p.instance + ".7"},
		{decode.Event{ID: "", Position: table}, "0/0#2@" + p.instance + ".7"},
	} {
		if got := p.deadLetterID(&c.ev, 7); got != c.want {
			t.Errorf("deadLetterID(%q at %s, 7) = %q, want %q", c.ev.ID, c.ev.Position, got, c.want)
		}
	}
	ev := decode.Event{ID: " order 42\n", Position: table}
	ids := map[string]bool{p.deadLetterID(&ev, 7): true, p.deadLetterID(&ev, 8): true, q.deadLetterID(&ev, 7): true}
	if len(ids) != 3 {
		t.Errorf("dead-letter ids of table events, two sequence numbers and two publishers: %v, want 3 different", ids)
	}
	w := newWireMsg()
	w.fillDeadLetter(&ev, p.deadLetterID(&ev, 7), "dlq", "r", "s", "id contains whitespace", 1000)
	got, ok := ParseStored(&natsjs.RawStreamMsg{Header: w.msg.Header})
	if !ok || !got.DeadLetter || got.RowID != ev.ID || got.ID != p.deadLetterID(&ev, 7) {
		t.Errorf("ParseStored: dead letter %v, id %q, row id %q (ok %v); want the row id %q", got.DeadLetter, got.ID, got.RowID, ok, ev.ID)
	}
}

// TestWireSource: every message, dead letters too, carries the stamp's
// source; a new source (the slot's creation point, a new timeline) reaches
// the next message; filling a message allocates nothing.
func TestWireSource(t *testing.T) {
	stamp := sink.NewStamp(sink.Source{System: "7301234567890123456", Timeline: 1, Slot: "outbox_relay"})
	w := newWireMsg().withSource(stamp)
	ev := &decode.Event{ID: "id-1", AggregateType: "order", AggregateID: "42", EventType: "created",
		Payload: []byte(`{}`), Position: decode.Position{CommitLSN: 0x16B374D848, Index: 3}}
	w.fillEvent(ev, "outbox.order.created", "r")
	h := w.msg.Header
	for k, v := range map[string]string{contract.HeaderSourceSystem: "7301234567890123456", contract.HeaderSourceTimeline: "1", contract.HeaderSourceSlot: "outbox_relay"} {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if _, ok := h[contract.HeaderSourceOrigin]; ok {
		t.Errorf("origin stamped before it is known: %v", h)
	}
	stamp.Set(sink.Source{System: "7301234567890123456", Timeline: 2, Slot: "outbox_relay", Origin: 0x1A2B3C4})
	w.fillDeadLetter(ev, ev.ID, "dlq", "r", "outbox.order.created", "too large", 1000)
	if h := w.msg.Header; h.Get(contract.HeaderSourceOrigin) != "0/1A2B3C4" || h.Get(contract.HeaderSourceTimeline) != "2" {
		t.Errorf("dead letter after Set: %v", h)
	}
	got, ok := ParseStored(&natsjs.RawStreamMsg{Header: w.msg.Header})
	if want := stamp.Source(); !ok || got.Source != want {
		t.Errorf("ParseStored source %+v (ok %v), want %+v", got.Source, ok, want)
	}
	// Source.SetHeaders writes what the wire writes.
	hh := nats.Header{}
	SetSourceHeaders(hh, stamp.Source())
	for _, k := range []string{contract.HeaderSourceSystem, contract.HeaderSourceTimeline, contract.HeaderSourceSlot, contract.HeaderSourceOrigin} {
		if hh.Get(k) != w.msg.Header.Get(k) {
			t.Errorf("SetHeaders %s = %q, wire %q", k, hh.Get(k), w.msg.Header.Get(k))
		}
	}
	if n := testing.AllocsPerRun(100, func() { w.fillEvent(ev, "outbox.order.created", "r") }); n != 0 {
		t.Errorf("filling a stamped message allocates %v times", n)
	}
}

func TestParseStoredSource(t *testing.T) {
	base := func() nats.Header {
		return nats.Header{contract.HeaderMsgID: {"a"}, contract.HeaderCommitLSN: {"0/10"}, contract.HeaderTxnIndex: {"0"}}
	}
	h := base()
	if ev, ok := ParseStored(&natsjs.RawStreamMsg{Header: h}); !ok || !ev.Source.IsZero() {
		t.Errorf("a message of an older relay: %+v %v", ev, ok)
	}
	for _, bad := range []struct{ key, value string }{{contract.HeaderSourceTimeline, "x"}, {contract.HeaderSourceTimeline, ""}, {contract.HeaderSourceOrigin, "nope"}} {
		h := base()
		SetSourceHeaders(h, sink.Source{System: "1", Timeline: 1, Slot: "s", Origin: 0x10})
		h.Set(bad.key, bad.value)
		if bad.value == "" {
			h.Del(bad.key)
		}
		if _, ok := ParseStored(&natsjs.RawStreamMsg{Header: h}); ok {
			t.Errorf("a source with %s %q was read", bad.key, bad.value)
		}
	}
	me := sink.Source{System: "1", Timeline: 2, Slot: "s", Origin: 0x10}
	for _, c := range []struct {
		m                   sink.Source
		sameRelay, sameSlot bool
	}{
		{sink.Source{System: "1", Timeline: 1, Slot: "s", Origin: 0x10}, true, true}, // another timeline: still the slot
		{sink.Source{System: "1", Timeline: 2, Slot: "s", Origin: 0x20}, true, false},
		{sink.Source{System: "1", Timeline: 2, Slot: "s"}, true, false},
		{sink.Source{System: "1", Timeline: 2, Slot: "t", Origin: 0x10}, false, false},
		{sink.Source{System: "2", Timeline: 2, Slot: "s", Origin: 0x10}, false, false},
		{sink.Source{}, false, false},
	} {
		if me.SameRelay(c.m) != c.sameRelay || me.SameSlot(c.m) != c.sameSlot {
			t.Errorf("%+v: SameRelay %v SameSlot %v, want %v %v", c.m, me.SameRelay(c.m), me.SameSlot(c.m), c.sameRelay, c.sameSlot)
		}
	}
	if (sink.Source{System: "1", Slot: "s"}).SameSlot(sink.Source{System: "1", Slot: "s"}) {
		t.Error("two unknown creation points taken for the same slot")
	}
}

// TestWireOwnHeaders: an event's own headers travel with it, percent-encoded
// when a header could not carry them exactly, and leave nothing on the next
// message; they count toward the message's size.
func TestWireOwnHeaders(t *testing.T) {
	w := newWireMsg()
	ev := &decode.Event{ID: "id-1", AggregateType: "order", AggregateID: "1", EventType: "created", Payload: []byte(`{}`),
		Headers: []decode.Header{{Name: "traceparent", Value: "00-abc-01"}, {Name: "X-Note", Value: " padded"}}}
	w.fillEvent(ev, "outbox.order.created", "r")
	before := headerSize(w.msg.Header)
	h := w.msg.Header
	if h.Get("traceparent") != "00-abc-01" || h.Get("X-Note") != "%20padded" || h.Get(contract.HeaderPercentEncoded) != "X-Note" {
		t.Errorf("headers %v", h)
	}
	w.fillEvent(&decode.Event{ID: "id-2", AggregateType: "order", AggregateID: "1", EventType: "created", Payload: []byte(`{}`)}, "s", "r")
	if h := w.msg.Header; h.Get("traceparent") != "" || h.Get("X-Note") != "" || h.Get(contract.HeaderPercentEncoded) != "" {
		t.Errorf("the next message kept the event's own headers: %v", h)
	}
	if after := headerSize(w.msg.Header); after >= before {
		t.Errorf("header size %d with the event's headers, %d without", before, after)
	}
	w.fillDeadLetter(ev, ev.ID, "dlq", "r", "outbox.order.created", "refused", 1<<20)
	if w.msg.Header.Get("traceparent") != "00-abc-01" {
		t.Errorf("dead letter lost the event's headers: %v", w.msg.Header)
	}
}

// TestWireTableIdentity: the database and table travel with the source,
// exactly (a name with '%' or spaces is percent-encoded and read back),
// and the one-shot mark with every message of a publisher that sets it;
// SameTable takes a message for the table's by system, database and table
// whatever the slot, and an older relay's (without the table headers) only
// by its slot.
func TestWireTableIdentity(t *testing.T) {
	src := sink.Source{System: "7301234567890123456", Timeline: 1, Slot: "outbox_relay", Origin: 0x10, Database: "my db 100%", Table: "public.outbox_events"}
	w := newWireMsg().withSource(sink.NewStamp(src)).withReplay(contract.ReplayRetry)
	ev := &decode.Event{ID: "id-1", AggregateType: "order", AggregateID: "42", EventType: "created", Payload: []byte(`{}`)}
	w.fillEvent(ev, "outbox.order.created", "r")
	if got := w.msg.Header.Get(contract.HeaderSourceDatabase); got != "my%20db%20100%25" {
		t.Errorf("%s = %q", contract.HeaderSourceDatabase, got)
	}
	got, ok := ParseStored(&natsjs.RawStreamMsg{Header: w.msg.Header})
	if !ok || got.Source != src || got.Replay != contract.ReplayRetry || !got.OneShot() {
		t.Errorf("ParseStored: %+v (ok %v), want source %+v marked %q", got, ok, src, contract.ReplayRetry)
	}
	w.fillDeadLetter(ev, ev.ID, "dlq", "r", "outbox.order.created", "too large", 1000)
	if w.msg.Header.Get(contract.HeaderReplay) != contract.ReplayRetry {
		t.Errorf("a dead letter of a one-shot publish is not marked: %v", w.msg.Header)
	}
	copied := newWireMsg().withSource(sink.NewStamp(src)).withReplay(contract.ReplayCopy)
	copied.fillEvent(&decode.Event{ID: contract.ReplayMsgID("r1", "id-1"), AggregateType: "order", AggregateID: "42", EventType: "created"}, "replay.outbox.order.created", "r")
	if got, ok := ParseStored(&natsjs.RawStreamMsg{Header: copied.msg.Header}); !ok || !got.Copy() || !got.OneShot() || got.ID != "replay/r1/id-1" {
		t.Errorf("a replay's copy parsed as %+v (ok %v), want a marked copy and one-shot, its id kept", got, ok)
	}
	if plain := newWireMsg().withSource(sink.NewStamp(src)); true {
		plain.fillEvent(ev, "outbox.order.created", "r")
		if _, ok := plain.msg.Header[contract.HeaderReplay]; ok {
			t.Error("a relay's message marked as a one-shot")
		}
	}
	h := nats.Header{contract.HeaderMsgID: {"a"}, contract.HeaderCommitLSN: {"0/10"}, contract.HeaderTxnIndex: {"0"}}
	SetSourceHeaders(h, src)
	h.Set(contract.HeaderSourceTable, "bad%zz")
	if _, ok := ParseStored(&natsjs.RawStreamMsg{Header: h}); ok {
		t.Error("a malformed table header was read")
	}

	me := sink.Source{System: "1", Slot: "s", Database: "app", Table: "public.outbox_events"}
	for _, c := range []struct {
		m    sink.Source
		same bool
	}{
		{sink.Source{System: "1", Slot: "s", Database: "app", Table: "public.outbox_events"}, true},
		{sink.Source{System: "1", Slot: "renamed", Database: "app", Table: "public.outbox_events"}, true},
		{sink.Source{System: "1", Slot: "poll:public.outbox_events", Database: "app", Table: "public.outbox_events"}, true},
		{sink.Source{System: "1", Slot: "s", Database: "app", Table: "public.outbox2"}, false},
		{sink.Source{System: "1", Slot: "s", Database: "other", Table: "public.outbox_events"}, false},
		{sink.Source{System: "2", Slot: "s", Database: "app", Table: "public.outbox_events"}, false},
		{sink.Source{System: "1", Slot: "s"}, true},        // an older relay of this slot
		{sink.Source{System: "1", Slot: "renamed"}, false}, // an older relay of another slot: table unknown
		{sink.Source{}, false},
	} {
		if got := me.SameTable(c.m); got != c.same {
			t.Errorf("SameTable(%+v) = %v, want %v", c.m, got, c.same)
		}
	}
	if !sink.OfTable(sink.StoredEvent{}, me) || sink.OfTable(sink.StoredEvent{Source: sink.Source{System: "2"}}, me) {
		t.Error("OfTable: an unstamped message is not taken for the table's, or another system's is")
	}
}
