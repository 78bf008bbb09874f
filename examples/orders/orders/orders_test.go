package orders_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/examples/orders/orders"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

var server relaytest.Server

func TestMain(m *testing.M) {
	relaytest.RunWithServer(m, &server)
}

func newEnv(t *testing.T) *relaytest.Env {
	env := relaytest.NewEnv(t, server)
	if err := orders.Migrate(t.Context(), env.Pool); err != nil {
		t.Fatal(err)
	}
	return env
}

func count(t *testing.T, env *relaytest.Env, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := env.Pool.QueryRow(t.Context(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCreateOrder: the order and its event commit together, and a failing
// order leaves no event behind.
func TestCreateOrder(t *testing.T) {
	env := newEnv(t)
	svc, err := orders.NewService(env.Pool)
	if err != nil {
		t.Fatal(err)
	}
	o := orders.Order{ID: "ord-1", CustomerID: "cust-7", Total: 12050}
	id, err := svc.CreateOrder(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	var aggregate, eventType string
	var total int64
	if err := env.Pool.QueryRow(t.Context(), `SELECT aggregate_id, event_type, (payload->>'total')::bigint FROM outbox_events WHERE id::text = $1`, id).
		Scan(&aggregate, &eventType, &total); err != nil {
		t.Fatalf("the event %s: %v", id, err)
	}
	if aggregate != o.ID || eventType != orders.EventType || total != o.Total {
		t.Errorf("event = %s %s total %d", aggregate, eventType, total)
	}
	if _, err := svc.CreateOrder(t.Context(), o); err == nil {
		t.Fatal("the same order id twice was accepted")
	}
	// A constraint checked at COMMIT fails the order after its event was
	// written: the event must go with it.
	env.Exec(`ALTER TABLE orders ADD CONSTRAINT one_per_customer UNIQUE (customer_id) DEFERRABLE INITIALLY DEFERRED`)
	if _, err := svc.CreateOrder(t.Context(), orders.Order{ID: "ord-2", CustomerID: o.CustomerID, Total: 1}); err == nil {
		t.Fatal("the deferred constraint did not fail the order")
	}
	if n := count(t, env, `SELECT count(*) FROM outbox_events`); n != 1 {
		t.Errorf("%d events after failed orders, want 1: an event did not roll back with its order", n)
	}
}

// TestBillingOnce: an order.created event stored twice in the stream (a
// duplicate past the dedup window) makes one invoice.
func TestBillingOnce(t *testing.T) {
	env := newEnv(t)
	ctx := t.Context()
	stream, err := env.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "OUTBOX", Subjects: []string{"outbox.>"}, Duplicates: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	msg := &nats.Msg{Subject: "outbox.order.order%2Ecreated", Data: []byte(`{"order_id": "ord-9", "customer_id": "c", "total": 500}`), Header: nats.Header{}}
	msg.Header.Set(contract.HeaderMsgID, "evt-9")
	msg.Header.Set(contract.HeaderEventType, orders.EventType)
	msg.Header.Set(contract.HeaderAggregateType, orders.AggregateType)
	msg.Header.Set(contract.HeaderAggregateID, "ord-9")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := env.JS.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
		if info, err := stream.Info(ctx); err == nil && info.State.Msgs == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the duplicate was never stored")
		}
	}
	cons, err := orders.BillingConsumer(ctx, env.JS, "OUTBOX", orders.DefaultConsumer, "outbox.order.>")
	if err != nil {
		t.Fatal(err)
	}
	billing, err := orders.NewBilling(env.Pool, cons)
	if err != nil {
		t.Fatal(err)
	}
	bctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- billing.Run(bctx) }()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		info, err := cons.Info(ctx)
		if err == nil && info.AckFloor.Stream == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the consumer did not acknowledge both messages: %+v %v", info, err)
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got, err := orders.Consumed(ctx, env.Pool, []string{"evt-9"})
	if err != nil {
		t.Fatal(err)
	}
	if got["evt-9"] != 1 {
		t.Errorf("the event made %d invoices, want 1", got["evt-9"])
	}
}
