package jetstream

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Tracing: one span per event, from its commit to its PubAck, a child of
// the row's traceparent header when it has one. The span's own context
// replaces the row's traceparent and tracestate in the message, so a
// consumer continues the trace from the relay's span. The span is started
// when the event is offered (timestamped with its commit) and kept in its
// slot: every attempt at sending it carries the same context, and the
// PubAck that settles it ends it.

// Trace header names (W3C trace context).
const (
	headerTraceparent = "traceparent"
	headerTracestate  = "tracestate"
)

// Span attributes beyond the messaging semantic conventions.
const (
	attrLSN           = attribute.Key("outbox.lsn")
	attrEventType     = attribute.Key("outbox.event_type")
	attrAggregateType = attribute.Key("outbox.aggregate_type")
	attrAggregateID   = attribute.Key("outbox.aggregate_id")
	attrDuplicate     = attribute.Key("outbox.duplicate")
	attrDeadLetter    = attribute.Key("outbox.dead_letter_reason")
	// db.system is the name before semconv 1.26 renamed it db.system.name;
	// both are set so that backends of either generation group by it.
	attrDBSystem = attribute.Key("db.system")
)

// tracerName is the instrumentation scope of the relay's spans.
const tracerName = "github.com/outbox-relay/outbox-relay/sink/jetstream"

// tracer starts and ends the spans of a Publisher's events; nil when
// tracing is off, and then nothing of this file runs.
type tracer struct {
	t        trace.Tracer
	subject  sink.Template
	name     string               // the spans' name: operation and subject template
	constant []attribute.KeyValue // the attributes every span has
}

func newTracer(tp trace.TracerProvider, subject sink.Template) *tracer {
	if tp == nil {
		return nil
	}
	return &tracer{
		t:       tp.Tracer(tracerName),
		subject: subject,
		name:    "publish " + subject.String(),
		constant: []attribute.KeyValue{
			semconv.MessagingSystemKey.String("nats"),
			semconv.MessagingOperationTypeSend,
			semconv.MessagingOperationName("publish"),
			semconv.MessagingDestinationTemplate(subject.String()),
			semconv.DBSystemNamePostgreSQL,
			attrDBSystem.String("postgresql"),
		},
	}
}

// eventSpan is an event's span and the trace headers its message carries.
type eventSpan struct {
	span        trace.Span
	traceparent string
	tracestate  string
}

// start starts ev's span, timestamped with its commit (when known and not
// ahead of this clock). The attributes are built only for a span that
// records: a sampled-out span costs the trace context and nothing more.
func (t *tracer) start(ev *decode.Event) eventSpan {
	ctx := propagation.TraceContext{}.Extract(context.Background(), rowHeaders(ev.Headers))
	at := time.Now()
	if !ev.CommitTime.IsZero() && ev.CommitTime.Before(at) {
		at = ev.CommitTime
	}
	ctx, span := t.t.Start(ctx, t.name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithTimestamp(at))
	if span.IsRecording() {
		span.SetAttributes(t.attributes(ev)...)
	}
	es := eventSpan{span: span}
	propagation.TraceContext{}.Inject(ctx, &es)
	return es
}

// attributes are a recording span's: the constant ones and ev's.
func (t *tracer) attributes(ev *decode.Event) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, len(t.constant)+7)
	attrs = append(attrs, t.constant...)
	return append(attrs,
		semconv.MessagingDestinationName(t.subject.Render(ev)),
		semconv.MessagingMessageID(ev.MsgID()), // as Nats-Msg-Id: qualified by a relay of several tables
		semconv.MessagingMessageBodySize(len(ev.Payload)),
		attrLSN.String(formatLSN(ev.Position.CommitLSN)),
		attrEventType.String(ev.EventType),
		attrAggregateType.String(ev.AggregateType),
		attrAggregateID.String(ev.AggregateID),
	)
}

// Get, Set and Keys make an eventSpan the carrier its headers are
// injected into.
func (e *eventSpan) Get(key string) string { return "" }
func (e *eventSpan) Keys() []string        { return nil }
func (e *eventSpan) Set(key, value string) {
	switch key {
	case headerTraceparent:
		e.traceparent = value
	case headerTracestate:
		e.tracestate = value
	}
}

// deadLettered notes on the span that the message goes to the
// dead-letter subject instead, and why.
func (e *eventSpan) deadLettered(subject, reason string) {
	if e.span != nil && e.span.IsRecording() {
		e.span.SetAttributes(semconv.MessagingDestinationName(subject), attrDeadLetter.String(reason))
	}
}

// failed notes an attempt that failed; the event is sent again.
func (e *eventSpan) failed(err error) {
	if e.span != nil && e.span.IsRecording() {
		e.span.AddEvent("publish failed", trace.WithAttributes(attribute.String("error.message", err.Error())))
	}
}

// stored ends the span at the PubAck: an error status for a dead letter
// (the event did not reach its subject). Only the rare outcomes add an
// attribute: a second SetAttributes per span costs a tenth of its CPU.
func (e *eventSpan) stored(r reply, deadLetter string) {
	if e.span == nil {
		return
	}
	if e.span.IsRecording() {
		if r.duplicate {
			e.span.SetAttributes(attrDuplicate.Bool(true))
		}
		if deadLetter != "" {
			e.span.SetStatus(codes.Error, "dead-lettered: "+deadLetter)
		}
	}
	e.span.End()
	e.span = nil
}

// abandoned ends the span of an event the publisher stops without a
// PubAck for (closed before the drain finished): the next run publishes
// it again under a span of its own.
func (e *eventSpan) abandoned() {
	if e.span == nil {
		return
	}
	e.span.SetStatus(codes.Error, "not acknowledged before the publisher closed")
	e.span.End()
	e.span = nil
}

// rowHeaders reads the trace context from a row's own headers, whatever
// the case of their names (HTTP header names are case-insensitive).
type rowHeaders []decode.Header

func (h rowHeaders) Get(key string) string {
	for _, x := range h {
		if strings.EqualFold(x.Name, key) {
			return x.Value
		}
	}
	return ""
}

func (h rowHeaders) Set(string, string) {}

func (h rowHeaders) Keys() []string {
	keys := make([]string, len(h))
	for i, x := range h {
		keys[i] = x.Name
	}
	return keys
}

// isTraceHeader reports whether a row's header is one the relay's span
// replaces in the message.
func isTraceHeader(name string) bool {
	return strings.EqualFold(name, headerTraceparent) || strings.EqualFold(name, headerTracestate)
}

// traceparentSized stands for a span's traceparent in a size check
// (Publisher.Rejects), which has no span: version, trace id, span id and
// flags are always 55 characters.
const traceparentSized = "00-00000000000000000000000000000000-0000000000000000-00"
