package outbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// TestWriteTraceContext: with a span in the caller's context, Write,
// WriteSQL and Emit give each event without a traceparent the span's (and
// its tracestate); an event's own traceparent is kept; a context without a
// span, or WithoutTraceContext, adds nothing.
func TestWriteTraceContext(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("test").Start(context.Background(), "create order")
	defer span.End()
	state, err := trace.ParseTraceState("congo=t61rcWkgMzE")
	if err != nil {
		t.Fatal(err)
	}
	ctx = trace.ContextWithSpanContext(ctx, span.SpanContext().WithTraceState(state))
	sc := trace.SpanContextFromContext(ctx)
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	own := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

	evs := []outbox.Event{valid(), valid()}
	evs[1].Headers = map[string]string{"Traceparent": own}
	ids := commitBoth(t, env,
		func(tx pgx.Tx) ([]string, error) { return outbox.Write(ctx, tx, evs...) },
		func(tx *sql.Tx) ([]string, error) { return outbox.WriteSQL(ctx, tx, evs...) })
	for i, id := range ids {
		hs := storedHeaders(t, env, id)
		if i%2 == 0 && (hs["traceparent"] != want || hs["tracestate"] != "congo=t61rcWkgMzE") {
			t.Errorf("event %d: headers %v; want traceparent %s and the tracestate", i, hs, want)
		}
		if i%2 == 1 && (hs["Traceparent"] != own || len(hs) != 1) {
			t.Errorf("event %d with a traceparent of its own: headers %v", i, hs)
		}
	}
	if len(evs[0].Headers) != 0 || len(evs[1].Headers) != 1 {
		t.Errorf("the caller's events were changed: %v, %v", evs[0].Headers, evs[1].Headers)
	}

	w, err := outbox.NewWriter(outbox.WithoutTraceContext())
	if err != nil {
		t.Fatal(err)
	}
	ids = commitBoth(t, env,
		func(tx pgx.Tx) ([]string, error) { return outbox.Write(context.Background(), tx, valid()) },
		func(tx *sql.Tx) ([]string, error) { return w.WriteSQL(ctx, tx, valid()) })
	for _, id := range ids {
		if hs := storedHeaders(t, env, id); hs != nil {
			t.Errorf("headers %v without a span or with WithoutTraceContext", hs)
		}
	}
}

func storedHeaders(t *testing.T, env *relaytest.Env, id string) map[string]string {
	t.Helper()
	var text *string
	if err := env.Pool.QueryRow(context.Background(), `SELECT headers::text FROM outbox_events WHERE id = $1`, id).Scan(&text); err != nil {
		t.Fatal(err)
	}
	if text == nil {
		return nil
	}
	var hs map[string]string
	if err := json.Unmarshal([]byte(*text), &hs); err != nil {
		t.Fatal(err)
	}
	return hs
}
