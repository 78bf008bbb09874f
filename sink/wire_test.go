package sink

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

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
		HeaderMsgID: "id-1", HeaderAggregateType: "order", HeaderAggregateID: "%2042", HeaderEventType: "a%0D%0ANats-Msg-Id:%20x",
		HeaderCreatedAt: "2026-12-02T11:36:09.5Z", HeaderCommitLSN: "16/B374D848", HeaderTxnIndex: "3",
		HeaderPercentEncoded: "Outbox-Aggregate-Id,Outbox-Event-Type",
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	// The message is reused: the next event leaves nothing of this one.
	w.fillEvent(&decode.Event{ID: "id-2", Payload: []byte(`{}`)}, "s", "r")
	if h := w.msg.Header; h.Get(HeaderPercentEncoded) != "" || h.Get(HeaderCreatedAt) != "" || h.Get(HeaderMsgID) != "id-2" {
		t.Errorf("reused message kept old headers: %v", h)
	}
	if headerSize(w.msg.Header) <= 12 {
		t.Error("headerSize too small")
	}
}

func TestDeadLetterMessage(t *testing.T) {
	w := newWireMsg()
	big := &decode.Event{ID: "id-9", AggregateType: "a", AggregateID: "b", EventType: "c", Payload: make([]byte, 2000)}
	w.fillDeadLetter(big, "dlq", "r", "outbox.a.c", "too large", 1000)
	h := w.msg.Header
	if h.Get(HeaderMsgID) != DeadLetterMsgIDPrefix+"id-9" || h.Get(HeaderDeadLetterReason) != "too large" || h.Get(HeaderOriginalSubject) != "outbox.a.c" {
		t.Errorf("headers %v", h)
	}
	if len(w.msg.Data) != 0 || h.Get(HeaderPayloadOmitted) == "" {
		t.Error("a payload over the limit went into the dead letter")
	}
	w.fillDeadLetter(&decode.Event{Problem: "id is NULL", Payload: []byte(`{}`), Position: decode.Position{CommitLSN: 0x10, Index: 2}}, "dlq", "r", "s", "id is NULL", 1000)
	if got := w.msg.Header.Get(HeaderMsgID); got != DeadLetterMsgIDPrefix+"0/10#2" || string(w.msg.Data) != `{}` {
		t.Errorf("dead letter without id: Nats-Msg-Id %q, data %q", got, w.msg.Data)
	}
}
