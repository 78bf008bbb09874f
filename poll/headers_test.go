package poll

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// TestPollEventHeaders: an event's own headers (the headers column,
// written by outbox.Write) travel with its message in polling mode too; a
// row whose headers column sets a reserved name is tried, then
// dead-lettered with the reason, and its aggregate's next event flows.
func TestPollEventHeaders(t *testing.T) {
	env := pollEnv(t)
	ctx := context.Background()
	trace := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "congo=t61rcWkgMzE"}
	write := func(ev outbox.Event) string {
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
	ev := outbox.Event{AggregateType: "order", AggregateID: "1", EventType: "order.created", Payload: json.RawMessage(`{}`), Headers: trace}
	traced := write(ev)
	var bad string
	if err := env.Pool.QueryRow(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers)
		VALUES ('order', '1', 'order.paid', '{}', '{"Nats-Msg-Id": "forged"}') RETURNING id::text`).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	ev.EventType, ev.Headers = "order.shipped", nil
	plain := write(ev)

	cfg := config(t, env)
	cfg.MaxAttempts, cfg.Backoff, cfg.MaxBackoff, cfg.Interval = 2, 50*time.Millisecond, time.Second, 50*time.Millisecond
	start(t, env, cfg)
	waitFor(t, "every row settled", 30*time.Second, func() bool { return pending(t, env) == 0 })
	env.WaitStored(3, 30*time.Second)

	byID := map[string]int{}
	msgs := storedMsgs(t, env)
	for i, m := range msgs {
		byID[strings.TrimPrefix(m.Header.Get("Nats-Msg-Id"), contract.DeadLetterMsgIDPrefix)] = i
	}
	if len(msgs) != 3 {
		t.Fatalf("stream holds %d messages, want 3", len(msgs))
	}
	m := msgs[byID[traced]]
	for k, v := range trace {
		if got := m.Header.Get(k); got != v {
			t.Errorf("event %s: header %s = %q, want %q", traced, k, got, v)
		}
	}
	if m := msgs[byID[plain]]; m.Header.Get("traceparent") != "" {
		t.Errorf("event without headers carries %v", m.Header)
	}
	dead := msgs[byID[bad]]
	reason := dead.Header.Get(contract.HeaderDeadLetterReason)
	if dead.Subject != env.DeadSubj || !strings.Contains(reason, "reserved") || !strings.Contains(reason, "gave up after 2 attempts") {
		t.Errorf("row with a forged Nats-Msg-Id header stored on %s with reason %q, want the dead-letter subject, reserved, gave up after 2 attempts", dead.Subject, reason)
	}
	if !(byID[traced] < byID[bad] && byID[bad] < byID[plain]) {
		t.Errorf("stream order %v, want the traced event, the dead letter, then the plain one", byID)
	}
	env.CheckWith(relaytest.Expect{Polled: true})
}
