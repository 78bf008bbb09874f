package jetstream

import (
	"context"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/outbox-relay/outbox-relay/decode"
)

// BenchmarkTracePerEvent measures the relay's per-event work that tracing
// touches: the span started when the event is offered, the message built
// with its headers, the destination noted when it is sent, the span ended
// at its PubAck. "off" is the relay without OTEL_* variables (no tracer at
// all); "noop" a no-op TracerProvider; "sdk" the SDK with a batch span
// processor and an in-memory exporter, every span sampled; "sdk-unsampled"
// the SDK where the sampler drops the span (a row whose traceparent says
// not sampled). "sdk-batch-links" is the alternative not chosen: one span
// per 100-event transaction with a link per event. Besides ns/op (wall
// time, inflated on a busy machine) each reports cpu-ns/op: the process's
// CPU time per event, the exporter's goroutine and the GC included. Rerun
// with
//
//	go test -run '^$' -bench BenchmarkTracePerEvent -benchmem -cpu 1 -count 5 ./sink/jetstream/
func BenchmarkTracePerEvent(b *testing.B) {
	exp := tracetest.NewInMemoryExporter()
	sdk := func(s sdktrace.Sampler) trace.TracerProvider {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithSampler(s))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		return tp
	}
	for _, c := range []struct {
		name string
		tp   trace.TracerProvider
	}{
		{"off", nil},
		{"noop", noop.NewTracerProvider()},
		{"sdk", sdk(sdktrace.AlwaysSample())},
		{"sdk-unsampled", sdk(sdktrace.NeverSample())},
	} {
		b.Run(c.name, func(b *testing.B) { benchEvents(b, newTracer(c.tp, mustTemplate(b)), exp) })
	}
	b.Run("sdk-batch-links", func(b *testing.B) {
		benchBatchLinks(b, sdk(sdktrace.AlwaysSample()).Tracer(tracerName), exp)
	})
}

// benchEvent is an event as a traced producer writes it.
func benchEvent() *decode.Event {
	ev := event(1, []byte(`{"order_id":"ord-1","total":10.99}`))
	ev.CommitTime = time.Now()
	ev.Headers = []decode.Header{{Name: "traceparent", Value: rowTraceparent}}
	return ev
}

func benchEvents(b *testing.B, tr *tracer, exp *tracetest.InMemoryExporter) {
	ev, w := benchEvent(), newWireMsg()
	b.ReportAllocs()
	defer reportCPU(b)()
	for i := 0; b.Loop(); i++ {
		var span eventSpan
		if tr != nil {
			span = tr.start(ev)
		}
		w.traceparent, w.tracestate = span.traceparent, span.tracestate
		w.fillEvent(ev, "outbox.order.created", "_INBOX.x.1.1")
		span.stored(reply{streamSeq: uint64(i)}, "")
		if i%8192 == 0 {
			exp.Reset() // keep the exported spans from growing the heap
		}
	}
}

// benchBatchLinks is the per-event cost of one span per transaction of
// 100 events, each event's producer span a link.
func benchBatchLinks(b *testing.B, t trace.Tracer, exp *tracetest.InMemoryExporter) {
	ev, w := benchEvent(), newWireMsg()
	var span trace.Span
	var parent, state string
	b.ReportAllocs()
	defer reportCPU(b)()
	for i := 0; b.Loop(); i++ {
		if i%100 == 0 {
			if span != nil {
				span.End()
			}
			var ctx context.Context
			ctx, span = t.Start(context.Background(), "publish batch", trace.WithSpanKind(trace.SpanKindProducer))
			var es eventSpan
			propagation.TraceContext{}.Inject(ctx, &es)
			parent, state = es.traceparent, es.tracestate
		}
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), rowHeaders(ev.Headers)))
		span.AddLink(trace.Link{SpanContext: sc})
		w.traceparent, w.tracestate = parent, state
		w.fillEvent(ev, "outbox.order.created", "_INBOX.x.1.1")
		if i%8192 == 0 {
			exp.Reset()
		}
	}
	span.End()
}

// reportCPU starts counting the process's CPU time; the function it
// returns reports it per iteration as cpu-ns/op.
func reportCPU(b *testing.B) func() {
	start := cpuTime(b)
	return func() {
		b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
	}
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
