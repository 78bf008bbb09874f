package jetstream

import (
	"context"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/sink"
)

const (
	rowTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	rowSpanID      = "00f067aa0ba902b7"
	rowTraceparent = "00-" + rowTraceID + "-" + rowSpanID + "-01"
)

// TestTracedPublish: every event gets one span from its commit to its
// PubAck, a child of the row's traceparent when it has one (whatever the
// header's case) and a root otherwise; the stored message carries the
// span's context in place of the row's; a dead letter's span says so.
func TestTracedPublish(t *testing.T) {
	env := newTestEnv(t, natsjs.StreamConfig{})
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	p := env.publisher(t, Config{Tracer: tp})
	run(t, p)

	committed := time.Now().Add(-time.Second)
	child := event(1, nil)
	child.CommitTime = committed
	child.Headers = []decode.Header{{Name: "Traceparent", Value: rowTraceparent}, {Name: "tracestate", Value: "congo=t61rcWkgMzE"}, {Name: "x-note", Value: "kept"}}
	root := event(2, nil)
	dead := event(3, nil)
	dead.Problem = "aggregate_id is NULL"
	for _, ev := range []*decode.Event{child, root, dead} {
		if _, err := p.Publish(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	drain(t, p, 10*time.Second)

	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[attrOf(s, "messaging.message.id")] = s
	}
	if len(rec.Ended()) != 3 || len(spans) != 3 {
		t.Fatalf("%d spans ended for 3 events: %v", len(rec.Ended()), spans)
	}
	msgs := map[string]storedMsg{}
	for _, m := range env.contents(t) {
		id := m.id
		if v := m.header.Get(contract.HeaderEventID); v != "" {
			id = v // a dead letter's
		}
		msgs[id] = m
	}

	s := spans[child.ID]
	if got := s.Parent(); got.TraceID().String() != rowTraceID || got.SpanID().String() != rowSpanID || !got.IsRemote() {
		t.Errorf("child span's parent %v; want the row's %s", got, rowTraceparent)
	}
	if !s.StartTime().Equal(committed) || s.SpanKind() != trace.SpanKindProducer || s.Name() != "publish "+testTemplate {
		t.Errorf("span starts %v (commit %v), kind %v, name %q", s.StartTime(), committed, s.SpanKind(), s.Name())
	}
	for k, want := range map[string]string{"messaging.system": "nats", "messaging.destination.name": msgs[child.ID].subject,
		"messaging.operation.type": "send", "db.system": "postgresql", "db.system.name": "postgresql", "outbox.lsn": formatLSN(child.Position.CommitLSN),
		"outbox.event_type": "created", "outbox.aggregate_id": "agg-1"} {
		if got := attrOf(s, k); got != want {
			t.Errorf("child span %s = %q; want %q", k, got, want)
		}
	}
	h := msgs[child.ID].header
	if want := "00-" + rowTraceID + "-" + s.SpanContext().SpanID().String() + "-01"; h.Get("traceparent") != want || h.Get("Traceparent") != "" {
		t.Errorf("child message traceparent %q (row's spelling %q); want the relay span's %s", h.Get("traceparent"), h.Get("Traceparent"), want)
	}
	if h.Get("tracestate") != "congo=t61rcWkgMzE" || h.Get("x-note") != "kept" {
		t.Errorf("child message headers %v: tracestate or the row's own header lost", h)
	}

	s = spans[root.ID]
	if s.Parent().IsValid() {
		t.Errorf("a row without traceparent got a parent %v", s.Parent())
	}
	if want := "00-" + s.SpanContext().TraceID().String() + "-" + s.SpanContext().SpanID().String() + "-01"; msgs[root.ID].header.Get("traceparent") != want {
		t.Errorf("root message traceparent %q; want %s", msgs[root.ID].header.Get("traceparent"), want)
	}

	s = spans[dead.ID]
	if s.Status().Code != codes.Error || !strings.Contains(s.Status().Description, "dead-lettered") || attrOf(s, "messaging.destination.name") != testDeadLetter {
		t.Errorf("dead letter's span: status %v, destination %q", s.Status(), attrOf(s, "messaging.destination.name"))
	}
}

// TestUntracedPublishHasNoTraceHeaders: without a Tracer the row's own
// trace headers go through unchanged and no others are added.
func TestUntracedPublishHasNoTraceHeaders(t *testing.T) {
	w := newWireMsg()
	ev := event(1, nil)
	w.fillEvent(ev, "s", "r")
	if w.msg.Header.Get("traceparent") != "" {
		t.Errorf("untraced message has a traceparent: %v", w.msg.Header)
	}
	ev.Headers = []decode.Header{{Name: "traceparent", Value: rowTraceparent}}
	w.fillEvent(ev, "s", "r")
	if w.msg.Header.Get("traceparent") != rowTraceparent {
		t.Errorf("untraced message lost the row's traceparent: %v", w.msg.Header)
	}
}

// TestTraceHeadersLeaveWithTheEvent: the relay span's headers are the
// event's, not the next one's, and a row tracestate is dropped when the
// relay starts a new trace (the row's traceparent was not valid).
func TestTraceHeadersLeaveWithTheEvent(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tr := newTracer(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), mustTemplate(t))
	ev := event(1, nil)
	ev.Headers = []decode.Header{{Name: "traceparent", Value: "garbage"}, {Name: "tracestate", Value: "a=b"}}
	span := tr.start(ev)
	w := newWireMsg()
	w.traceparent, w.tracestate = span.traceparent, span.tracestate
	w.fillEvent(ev, "s", "r")
	if h := w.msg.Header; h.Get("traceparent") != span.traceparent || h.Get("tracestate") != "" {
		t.Errorf("headers %v; want the relay's root span %s and no tracestate", h, span.traceparent)
	}
	w.traceparent, w.tracestate = "", ""
	w.fillEvent(event(2, nil), "s", "r")
	if h := w.msg.Header; h.Get("traceparent") != "" {
		t.Errorf("the next message kept the trace headers: %v", h)
	}
}

func attrOf(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if kv.Key == attribute.Key(key) {
			return kv.Value.Emit()
		}
	}
	return ""
}

func mustTemplate(t testing.TB) sink.Template {
	t.Helper()
	tmpl, err := sink.ParseTemplate(testTemplate)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}
