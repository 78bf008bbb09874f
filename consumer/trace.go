package consumer

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/nats-io/nats.go"

	"github.com/outbox-relay/outbox-relay/contract"
)

// Tracing: the relay publishes each message with the trace context of its
// span (traceparent, tracestate), itself a child of the producer's. The
// handler's context carries that context as its remote parent, so spans
// the handler starts (with any OpenTelemetry instrumentation: pgx's, an
// HTTP client's) continue the producer's trace; WithTracerProvider adds a
// consumer span of the Consumer's own around each delivery.

// WithTracerProvider makes the Consumer start a span per delivery, from
// tp: a child of the message's trace context, around the transaction,
// the handler and the ack, with an error status when the handler fails.
// The handler's context holds it. Without this option the handler's
// context holds the message's trace context only.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *Consumer) error {
		if tp != nil {
			c.tracer = tp.Tracer("github.com/outbox-relay/outbox-relay/consumer")
		}
		return nil
	}
}

// traced returns ctx with m's trace context and, with a tracer, the
// delivery's span (a no-op span without one).
func (c *Consumer) traced(ctx context.Context, m *Message) (context.Context, trace.Span) {
	ctx = propagation.TraceContext{}.Extract(ctx, headerCarrier(m.Header))
	if c.tracer == nil {
		return ctx, trace.SpanFromContext(ctx) // the remote parent: End does nothing
	}
	return c.tracer.Start(ctx, "process "+c.name, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		semconv.MessagingSystemKey.String("nats"),
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"),
		semconv.MessagingDestinationName(m.Subject),
		semconv.MessagingConsumerGroupName(c.name),
		semconv.MessagingMessageID(m.ID),
		semconv.MessagingMessageBodySize(len(m.Data)),
		attribute.String("outbox.event_type", m.EventType),
		attribute.String("outbox.aggregate_type", m.AggregateType),
		attribute.String("outbox.aggregate_id", m.AggregateID),
		attribute.Int64("outbox.deliveries", int64(m.Delivered)),
		attribute.Int64("outbox.stream_seq", int64(m.StreamSeq)),
	))
}

// spanFailed marks the delivery's span (in ctx) as failed with err.
func spanFailed(ctx context.Context, err error) {
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}

// headerCarrier reads a message's headers as a TextMapCarrier. NATS
// header names keep their case, so the lookup ignores it (http.Header's
// canonical form would miss "traceparent").
type headerCarrier nats.Header

func (h headerCarrier) Get(key string) string {
	if v, ok := h.lookup(key); ok {
		return v
	}
	// The CloudEvents form carries the trace in the distributed tracing
	// extension, percent-encoded like every attribute.
	if v, ok := h.lookup(contract.CEPrefix + key); ok {
		if dec, err := contract.CEDecode(v); err == nil {
			return dec
		}
	}
	return ""
}

// lookup finds key whatever its case.
func (h headerCarrier) lookup(key string) (string, bool) {
	if vs := h[key]; len(vs) > 0 {
		return vs[0], true
	}
	for name, vs := range h {
		if strings.EqualFold(name, key) && len(vs) > 0 {
			return vs[0], true
		}
	}
	return "", false
}

func (h headerCarrier) Set(key, value string) { h[key] = []string{value} }

func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for name := range h {
		keys = append(keys, name)
	}
	return keys
}
