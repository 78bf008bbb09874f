package messages

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// TestTraces: with OTEL_EXPORTER_OTLP_ENDPOINT set, the relay exports one
// span per event to a real OTLP/HTTP receiver: a child of the row's
// traceparent (written as a header, or filled by outbox.Write from the
// caller's span), a root for a row without one; each message carries its
// span's traceparent. SIGTERM flushes the spans still queued. Without
// OTEL_* variables nothing is traced: no export, no trace header added.
func TestTraces(t *testing.T) {
	clearOTelEnv(t)
	env := suite.NewEnv(t)
	ctx := context.Background()
	receiver := newOTLPReceiver(t)
	traced := suite.Relay
	traced.Env = append(slices.Clone(traced.Env), "OTEL_EXPORTER_OTLP_ENDPOINT="+receiver.srv.URL, "OTEL_BSP_SCHEDULE_DELAY=100")

	const headerTrace, headerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	callerTrace, callerSpan := trace.TraceID{0xca, 0x11, 0xe4, 1}, trace.SpanID{0xca, 0x11, 2}
	caller := trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: callerTrace, SpanID: callerSpan, TraceFlags: trace.FlagsSampled}))
	write := func(ctx context.Context, headers map[string]string) string {
		t.Helper()
		return writeEvent(ctx, t, env, outbox.Event{AggregateType: "order", AggregateID: "1", EventType: "order.created",
			Payload: json.RawMessage(`{}`), Headers: headers})
	}

	relay := relaytest.StartRelay(t, traced, append([]string{"run"}, env.RelayArgs()...)...)
	relay.WaitLog(relaytest.LogStreaming, 30*time.Second)
	relay.WaitLog("tracing: a span per event", 5*time.Second)
	withHeader := write(ctx, map[string]string{"traceparent": "00-" + headerTrace + "-" + headerSpan + "-01"})
	plain := write(ctx, nil)
	fromCaller := write(caller, nil)
	env.WaitStored(3, 30*time.Second)
	relaytest.WaitFor(t, 30*time.Second, "3 spans exported", func() bool { spans, _ := receiver.byMessageID(); return len(spans) == 3 })
	relay.Drain(30 * time.Second)

	spans, _ := receiver.byMessageID()
	stored := relaytest.StoredByID(t, env)
	parents := map[string][2]string{withHeader: {headerTrace, headerSpan}, fromCaller: {callerTrace.String(), callerSpan.String()}, plain: {}}
	for id, parent := range parents {
		if len(spans[id]) != 1 {
			t.Fatalf("event %s: %d spans, want 1", id, len(spans[id]))
		}
		s := spans[id][0]
		if parent[0] != "" && (hex.EncodeToString(s.span.TraceId) != parent[0] || hex.EncodeToString(s.span.ParentSpanId) != parent[1]) {
			t.Errorf("event %s: span in trace %x under %x; want %s under %s", id, s.span.TraceId, s.span.ParentSpanId, parent[0], parent[1])
		}
		if parent[0] == "" && len(s.span.ParentSpanId) != 0 {
			t.Errorf("event %s without traceparent: span has parent %x", id, s.span.ParentSpanId)
		}
		if got, want := stored[id].Header.Get("traceparent"), traceparentOf(s.span); got != want {
			t.Errorf("event %s: message traceparent %q; want the relay span's %s", id, got, want)
		}
		if s.service != "outbox-relay" || spanAttr(s.span, "messaging.system") != "nats" || spanAttr(s.span, "messaging.destination.name") != stored[id].Subject ||
			spanAttr(s.span, "db.system") != "postgresql" || spanAttr(s.span, "outbox.lsn") == "" || spanAttr(s.span, "outbox.event_type") != "order.created" {
			t.Errorf("event %s: service %q, attributes %v", id, s.service, s.span.Attributes)
		}
	}

	// Shutdown flushes: with a schedule delay the relay never reaches,
	// only SIGTERM's Shutdown can export the span.
	slow := suite.Relay
	slow.Env = append(slices.Clone(slow.Env), "OTEL_EXPORTER_OTLP_ENDPOINT="+receiver.srv.URL, "OTEL_BSP_SCHEDULE_DELAY=3600000")
	relay = relaytest.StartRelay(t, slow, append([]string{"run"}, env.RelayArgs()...)...)
	relay.WaitLog(relaytest.LogStreaming, 30*time.Second)
	flushed := write(ctx, nil)
	env.WaitStored(4, 30*time.Second)
	relay.Drain(30 * time.Second)
	if spans, _ = receiver.byMessageID(); len(spans[flushed]) != 1 {
		t.Errorf("event %s stored before SIGTERM: %d spans exported by the shutdown, want 1", flushed, len(spans[flushed]))
	}

	// Off without OTEL_* variables: the relay adds no trace header and
	// exports nothing (it does not know the receiver, but an exporter on by
	// default would say so in its log and add traceparent to every message).
	_, before := receiver.byMessageID()
	relay = suite.StartRelay(t, env)
	relay.WaitLog(relaytest.LogStreaming, 30*time.Second)
	untraced := write(ctx, nil)
	keeps := write(ctx, map[string]string{"traceparent": "00-" + headerTrace + "-" + headerSpan + "-01"})
	env.WaitStored(6, 30*time.Second)
	relay.Drain(30 * time.Second)
	stored = relaytest.StoredByID(t, env)
	if got := stored[untraced].Header.Get("traceparent"); got != "" {
		t.Errorf("untraced relay added traceparent %q", got)
	}
	if got := stored[keeps].Header.Get("traceparent"); got != "00-"+headerTrace+"-"+headerSpan+"-01" {
		t.Errorf("untraced relay changed the row's traceparent to %q", got)
	}
	if strings.Contains(relay.Logs(), "tracing") {
		t.Errorf("untraced relay logs tracing:\n%s", relay.Logs())
	}
	if _, after := receiver.byMessageID(); after != before {
		t.Errorf("%d exports while no OTEL_* variable was set", after-before)
	}
	env.CheckWith(relaytest.Expect{})
}

// clearOTelEnv unsets the OTEL_* variables this test process may have, for
// the relays it starts.
func clearOTelEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "OTEL_") {
			t.Setenv(name, "")
		}
	}
}

// writeEvent writes ev in a transaction of its own and returns its id.
func writeEvent(ctx context.Context, t *testing.T, env *relaytest.Env, ev outbox.Event) string {
	t.Helper()
	tx, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	ids, err := outbox.Write(ctx, tx, ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return ids[0]
}
