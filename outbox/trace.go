package outbox

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/contract"
)

// Trace context: when the caller's context holds a valid span (from any
// OpenTelemetry instrumentation: an HTTP handler's, a span of its own),
// Write and Emit give each event without a traceparent of its own the
// span's traceparent and tracestate (W3C trace context). The relay then
// publishes the event under a span that is a child of the caller's, and a
// consumer continues the same trace.

// WithoutTraceContext stops the Writer from adding the caller's trace
// context to the events' headers: for a table without the headers column
// (migration 00006), where an event with headers cannot be written.
func WithoutTraceContext() Option {
	return func(w *Writer) error { w.noTrace = true; return nil }
}

// traceHeaders returns ctx's span context as headers; nil when ctx holds
// no valid span or w does not add it.
func (w *Writer) traceHeaders(ctx context.Context) map[string]string {
	if w.noTrace || !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	h := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, h)
	return h
}

// withTrace returns ev's headers with the trace headers added, unless ev
// carries a traceparent of its own (the caller chose its parent) or has no
// room for them. The caller's map is not changed.
func withTrace(own, trace map[string]string) map[string]string {
	if len(trace) == 0 || len(own)+len(trace) > contract.MaxHeaders {
		return own
	}
	for name := range own {
		if strings.EqualFold(name, "traceparent") {
			return own
		}
	}
	hs := make(map[string]string, len(own)+len(trace))
	for name, v := range own {
		if !strings.EqualFold(name, "tracestate") { // it belongs to the traceparent it came with
			hs[name] = v
		}
	}
	for name, v := range trace {
		hs[name] = v
	}
	return hs
}
