package consumer

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"
)

const relaySpan = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// publishTraced stores a relay message for id whose trace context is
// relaySpan's.
func (f *fixture) publishTraced(id string) uint64 {
	ev := &decode.Event{ID: id, AggregateType: "order", AggregateID: "1", EventType: "order.created", Payload: []byte(`{}`),
		Headers: []decode.Header{{Name: "traceparent", Value: relaySpan}}}
	return f.publishMsg(jssink.EventMsg(ev, "outbox.order.order%2Ecreated"))
}

// TestHandlerContinuesTrace: the handler's context carries the message's
// trace context; with WithTracerProvider, a consumer span of its own,
// child of it, that records a failed delivery.
func TestHandlerContinuesTrace(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver) {
		f := newFixture(t, d)
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		var mu sync.Mutex
		type key struct{ consumer, id string }
		seen := map[key][]trace.SpanContext{}
		// handler records the contexts consumer's handler sees and fails
		// the first delivery of event 2.
		handler := func(consumer string) testHandler {
			return func(ctx context.Context, tx testTx, m *Message) error {
				mu.Lock()
				k := key{consumer, m.ID}
				seen[k] = append(seen[k], trace.SpanContextFromContext(ctx))
				n := len(seen[k])
				mu.Unlock()
				if m.ID == eventID(2) && n == 1 {
					return errors.New("once")
				}
				return nil
			}
		}
		plain := f.publishTraced(eventID(1))
		f.run(f.consumer("plain", time.Second), handler("plain"))
		relaytest.WaitFor(t, 30*time.Second, "plain consumer settled", func() bool { return f.settled("plain", plain) })
		mu.Lock()
		if sc := seen[key{"plain", eventID(1)}][0]; !sc.IsRemote() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" {
			t.Errorf("handler's span context %v; want the message's %s as a remote parent", sc, relaySpan)
		}
		mu.Unlock()

		traced := f.publishTraced(eventID(2))
		f.run(f.consumer("traced", time.Second), handler("traced"), WithTracerProvider(tp), WithBackoff(20*time.Millisecond, time.Second))
		relaytest.WaitFor(t, 30*time.Second, "traced consumer settled", func() bool { return f.settled("traced", traced) })
		// The span ends after the ack the server reports: wait for it.
		var spans []sdktrace.ReadOnlySpan
		relaytest.WaitFor(t, 10*time.Second, "two spans of event 2", func() bool {
			spans = spans[:0]
			for _, s := range rec.Ended() {
				if attr(s, "messaging.message.id") == eventID(2) {
					spans = append(spans, s)
				}
			}
			return len(spans) >= 2
		})
		if len(spans) != 2 {
			t.Fatalf("%d spans for two deliveries of %s", len(spans), eventID(2))
		}
		for i, s := range spans {
			if s.Parent().SpanID().String() != "00f067aa0ba902b7" || s.SpanKind() != trace.SpanKindConsumer || attr(s, "messaging.consumer.group.name") != "traced" {
				t.Errorf("delivery %d: span parent %v, kind %v, attributes %v", i+1, s.Parent(), s.SpanKind(), s.Attributes())
			}
			mu.Lock()
			if got := seen[key{"traced", eventID(2)}][i]; got.SpanID() != s.SpanContext().SpanID() {
				t.Errorf("delivery %d: the handler's context holds %v, not the consumer span %v", i+1, got, s.SpanContext())
			}
			mu.Unlock()
		}
		if spans[0].Status().Code != codes.Error || spans[1].Status().Code == codes.Error {
			t.Errorf("statuses %v then %v; want the failed delivery's an error", spans[0].Status(), spans[1].Status())
		}
	})
}

// TestHeaderCarrierIgnoresCase: NATS keeps a header's case, the lookup
// does not care.
func TestHeaderCarrierIgnoresCase(t *testing.T) {
	h := headerCarrier(nats.Header{"Traceparent": {relaySpan}})
	if h.Get("traceparent") != relaySpan {
		t.Errorf("Get(traceparent) = %q", h.Get("traceparent"))
	}
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}
