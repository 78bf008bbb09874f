package messages

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

// TestEventHeaders: an event's own headers (the headers column, written by
// outbox.Write) travel with its message, from the table at the slot's
// creation and from the WAL alike; a row whose headers cannot be
// published is a dead letter with the reason, and the events after it flow.
func TestEventHeaders(t *testing.T) {
	env := suite.NewEnv(t)
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
	fromTable := write(ev)

	relay := suite.StartRelay(t, env)
	relay.WaitLog(relaytest.LogStreaming, 30*time.Second)
	fromWAL := write(ev)
	var bad string
	if err := env.Pool.QueryRow(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers)
		VALUES ('order', '1', 'order.paid', '{}', '{"Nats-Msg-Id": "forged"}') RETURNING id::text`).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	ev.Headers = nil
	plain := write(ev)
	env.WaitStored(4, 30*time.Second)

	stored := relaytest.StoredByID(t, env)
	for _, id := range []string{fromTable, fromWAL} {
		m := stored[id]
		for k, v := range trace {
			if got := m.Header.Get(k); got != v {
				t.Errorf("event %s: header %s = %q, want %q", id, k, got, v)
			}
		}
	}
	if m := stored[plain]; m.Header.Get("traceparent") != "" {
		t.Errorf("event without headers carries %v", m.Header)
	}
	dead := stored[bad]
	if dead == nil || dead.Subject != env.DeadSubj || !strings.Contains(dead.Header.Get(contract.HeaderDeadLetterReason), "reserved") {
		t.Fatalf("row with a forged Nats-Msg-Id header: %+v", dead)
	}
	env.CheckWith(relaytest.Expect{})
}
