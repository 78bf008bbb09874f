package jetstream

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/sink"
)

// hostileEvent has values a header cannot carry as they are, and own
// headers of every kind the CloudEvents form treats apart.
func hostileEvent() *decode.Event {
	return &decode.Event{ID: "id-1", AggregateType: "order", AggregateID: "Zoë 😀 \"42\"", EventType: "order.créé",
		CreatedAt: "2026-12-02T11:36:09.5Z", Payload: []byte(`{"a":1}`), Position: decode.Position{CommitLSN: 0x16B374D848, Index: 3},
		Headers: []decode.Header{
			{Name: "traceparent", Value: "00-abc-01"},
			{Name: "TenantID", Value: "t 1"},
			{Name: "X-Request-Id", Value: " r1"},         // no extension name: a plain header
			{Name: "Type", Value: "spoof"},               // a context attribute's name: a plain header
			{Name: "ce-id", Value: "spoof"},              // would read as an attribute: dropped
			{Name: "Content-Type", Value: "a b c"},       // no media type: dropped, data stays JSON
			{Name: "averyveryverylongname1", Value: "x"}, // over 20 characters: a plain header
		}}
}

// headerMap flattens h for comparison.
func headerMap(h nats.Header) map[string]string {
	m := map[string]string{}
	for k, vs := range h {
		m[k] = strings.Join(vs, "|")
	}
	return m
}

// relayHeaders are the relay's own headers of hostileEvent, in both forms.
func relayHeaders() map[string]string {
	return map[string]string{
		contract.HeaderMsgID: "id-1", contract.HeaderAggregateType: "order",
		contract.HeaderAggregateID: "Zoë 😀 \"42\"", contract.HeaderEventType: "order.créé", // NATS carries them exactly
		contract.HeaderCreatedAt: "2026-12-02T11:36:09.5Z", contract.HeaderCommitLSN: "16/B374D848", contract.HeaderTxnIndex: "3",
	}
}

// TestOutboxFormatUnchanged: the default form is exactly today's message,
// the event's own headers as they are, whatever their names.
func TestOutboxFormatUnchanged(t *testing.T) {
	w := newWireMsg().withFormat(Format{})
	w.fillEvent(hostileEvent(), "outbox.order.x", "r")
	want := relayHeaders()
	maps.Copy(want, map[string]string{
		"traceparent": "00-abc-01", "TenantID": "t 1", "X-Request-Id": "%20r1", "Type": "spoof", "ce-id": "spoof",
		"Content-Type": "a b c", "averyveryverylongname1": "x",
		contract.HeaderPercentEncoded: "X-Request-Id",
	})
	if got := headerMap(w.msg.Header); !maps.Equal(got, want) {
		t.Errorf("headers\n got %v\nwant %v", got, want)
	}
}

// TestCloudEventHeaders: the binding's attributes, percent-encoded as it
// requires, the own headers as extensions, plain headers or dropped, and
// the relay's headers as in its own form.
func TestCloudEventHeaders(t *testing.T) {
	w := newWireMsg().withFormat(Format{CloudEvents: true, CESource: DefaultCESource("app db", "public.outbox_events")})
	w.fillEvent(hostileEvent(), "outbox.order.x", "r")
	want := relayHeaders()
	maps.Copy(want, map[string]string{
		"ce-specversion": "1.0", "ce-id": "id-1", "ce-source": "/postgres/app%2520db/public.outbox_events",
		"ce-type": "order.cr%C3%A9%C3%A9", "ce-subject": "Zo%C3%AB%20%F0%9F%98%80%20%2242%22",
		"ce-time": "2026-12-02T11:36:09.5Z", "ce-datacontenttype": "application/json",
		"ce-traceparent": "00-abc-01", "ce-tenantid": "t%201",
		"X-Request-Id": "%20r1", "Type": "spoof", "averyveryverylongname1": "x",
		contract.HeaderPercentEncoded: "X-Request-Id",
	})
	if got := headerMap(w.msg.Header); !maps.Equal(got, want) {
		t.Errorf("headers\n got %v\nwant %v", got, want)
	}
	if string(w.msg.Data) != `{"a":1}` {
		t.Errorf("body %q", w.msg.Data)
	}
	for k, vs := range w.msg.Header {
		if !strings.HasPrefix(k, contract.CEPrefix) {
			continue
		}
		if back, err := contract.CEDecode(vs[0]); err != nil || !headerSafe(vs[0]) || strings.ContainsAny(vs[0], ` "`) {
			t.Errorf("%s: %q is not a value the binding allows (%q, %v)", k, vs[0], back, err)
		}
	}
}

// TestCloudEventThenDeadLetter: a dead letter keeps the relay's own form
// after a CloudEvent, and the next CloudEvent has every attribute again;
// attributes an event lacks do not linger from the one before.
func TestCloudEventThenDeadLetter(t *testing.T) {
	w := newWireMsg().withFormat(Format{CloudEvents: true, CESource: "/s"})
	ev := hostileEvent()
	w.fillEvent(ev, "s", "r")
	first := headerMap(w.msg.Header)
	w.fillDeadLetter(ev, ev.ID, "dlq", "r", "s", "refused", 1<<20)
	for k := range w.msg.Header {
		if strings.HasPrefix(strings.ToLower(k), contract.CEPrefix) && k != "ce-id" { // ce-id: the row's own header, as today
			t.Errorf("dead letter has %s", k)
		}
	}
	if w.msg.Header.Get("traceparent") != "00-abc-01" {
		t.Errorf("dead letter lost the event's own headers: %v", w.msg.Header)
	}
	w.fillEvent(ev, "s", "r")
	if got := headerMap(w.msg.Header); !maps.Equal(got, first) {
		t.Errorf("after a dead letter\n got %v\nwant %v", got, first)
	}
	w.fillEvent(&decode.Event{ID: "id-2", AggregateType: "a", AggregateID: " ", EventType: "t", Payload: []byte(`{}`)}, "s", "r")
	keys := slices.Sorted(maps.Keys(w.msg.Header))
	want := []string{"Nats-Msg-Id", "Outbox-Aggregate-Id", "Outbox-Aggregate-Type", "Outbox-Commit-Lsn", "Outbox-Event-Type",
		"Outbox-Percent-Encoded", "Outbox-Txn-Index", "ce-datacontenttype", "ce-id", "ce-source", "ce-specversion", "ce-type"}
	if !slices.Equal(keys, want) {
		t.Errorf("headers of an event without time or subject: %v, want %v", keys, want)
	}
}

// TestCloudEventDataContentType: the event's own Content-Type names the
// data's media type when it is one; a bytea payload is bytes.
func TestCloudEventDataContentType(t *testing.T) {
	for _, c := range []struct {
		binary  bool
		headers []decode.Header
		want    string
	}{
		{false, nil, "application/json"},
		{true, nil, "application/octet-stream"},
		{true, []decode.Header{{Name: "content-type", Value: "application/protobuf"}}, "application/protobuf"},
		{false, []decode.Header{{Name: "Content-Type", Value: "text/plain; charset=utf-8"}}, "text/plain;%20charset=utf-8"},
		{false, []decode.Header{{Name: "Content-Type", Value: "not a type"}}, "application/json"},
	} {
		w := newWireMsg().withFormat(Format{CloudEvents: true, CESource: "/s"})
		w.fillEvent(&decode.Event{ID: "i", EventType: "t", Binary: c.binary, Headers: c.headers}, "s", "r")
		if got := w.msg.Header.Get(contract.HeaderCEDataContentType); got != c.want {
			t.Errorf("binary %v, headers %v: ce-datacontenttype %q, want %q", c.binary, c.headers, got, c.want)
		}
		if w.msg.Header.Get("Content-Type") != "" || w.msg.Header.Get("content-type") != "" {
			t.Errorf("Content-Type went along as a header: %v", w.msg.Header)
		}
	}
}

// TestCloudEventRejects: an event without a type is no CloudEvent, and
// the publisher dead-letters it in that form only.
func TestCloudEventRejects(t *testing.T) {
	ev := &decode.Event{ID: "i", AggregateType: "a", AggregateID: "b", EventType: " ", Payload: []byte(`{}`)}
	tpl, err := sink.ParseTemplate("outbox.{event_type}")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []Format{{}, {CloudEvents: true, CESource: "/s"}} {
		p := &Publisher{cfg: Config{Subject: tpl, Format: f}, maxSize: 1 << 20}
		got := p.Rejects(ev)
		if f.CloudEvents != (got != "") {
			t.Errorf("format %+v: Rejects = %q", f, got)
		}
	}
	if err := (Format{CloudEvents: true}).Validate(); err == nil {
		t.Error("a CloudEvents format without a source was accepted")
	}
	if err := (Format{CloudEvents: true, CESource: "/postgres/app/public.outbox_events"}).Validate(); err != nil {
		t.Error(err)
	}
}

// TestCloudEventSourceOfItsTable: a relay of several tables names each
// event's own table in ce-source; a table-less event gets the first's.
func TestCloudEventSourceOfItsTable(t *testing.T) {
	w := newWireMsg().withFormat(Format{CloudEvents: true, CESource: "/postgres/app/a.outbox",
		TableSources: map[string]string{"a.outbox": "/postgres/app/a.outbox", "b.outbox": "/postgres/app/b.outbox"}})
	for table, want := range map[string]string{"b.outbox": "/postgres/app/b.outbox", "a.outbox": "/postgres/app/a.outbox", "": "/postgres/app/a.outbox"} {
		ev := &decode.Event{ID: "1", EventType: "t", Table: table, QualifyID: true, Payload: []byte(`{}`)}
		w.fillEvent(ev, "s", "r")
		if got := w.msg.Header.Get(contract.HeaderCESource); got != want {
			t.Errorf("table %q: ce-source %q, want %q", table, got, want)
		}
		// Row 1 of each table: ce-id is the Nats-Msg-Id, qualified, so
		// that one --ce-source for every table still names each once.
		if got, msgID := w.msg.Header.Get(contract.HeaderCEID), w.msg.Header.Get(contract.HeaderMsgID); got != contract.CEEncode(msgID) {
			t.Errorf("table %q: ce-id %q, want the Nats-Msg-Id %q", table, got, msgID)
		}
	}
}

// TestCloudEventTraceOfTheRelaySpan: with a relay span, its context is the
// event's ce-traceparent, in place of the row's; no plain traceparent.
func TestCloudEventTraceOfTheRelaySpan(t *testing.T) {
	w := newWireMsg().withFormat(Format{CloudEvents: true, CESource: "/s"})
	w.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	row := []decode.Header{{Name: "traceparent", Value: "00-11111111111111111111111111111111-2222222222222222-01"}}
	w.fillEvent(&decode.Event{ID: "1", EventType: "t", Headers: row, Payload: []byte(`{}`)}, "s", "r")
	if got := w.msg.Header.Get(contract.CEPrefix + "traceparent"); got != w.traceparent {
		t.Errorf("ce-traceparent %q, want the relay span's %q", got, w.traceparent)
	}
	if got := w.msg.Header.Values("traceparent"); len(got) != 0 {
		t.Errorf("a plain traceparent beside the CloudEvents one: %q", got)
	}
}

// TestDefaultCloudEvents: one table's events name it in their default
// ce-source, under the database (percent-escaped); a relay of several
// tables names each table's own in TableSources, the first also in
// CESource.
func TestDefaultCloudEvents(t *testing.T) {
	one := DefaultCloudEvents("my app", contract.DefaultTable)
	if !one.CloudEvents || one.CESource != "/postgres/my%20app/public.outbox_events" || one.TableSources != nil || one.Validate() != nil {
		t.Errorf("one table: %+v (%v)", one, one.Validate())
	}
	a, b := contract.Table{Schema: "orders", Name: "outbox"}, contract.Table{Schema: "billing", Name: "outbox"}
	two := DefaultCloudEvents("app", a, b)
	want := map[string]string{"orders.outbox": "/postgres/app/orders.outbox", "billing.outbox": "/postgres/app/billing.outbox"}
	if !two.CloudEvents || two.CESource != want["orders.outbox"] || !maps.Equal(two.TableSources, want) {
		t.Errorf("two tables: %+v, want ce-sources %v", two, want)
	}
}
