package orders

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/consumer"
)

// DefaultConsumer is the durable consumer Billing reads from, and the
// name its events are recorded under in processed_events.
const DefaultConsumer = "billing"

// BillingConsumer creates (or updates) the durable pull consumer Billing
// needs on stream: explicit acks, no MaxDeliver (package consumer decides
// when to give up, after recording the event), messages on filter (the
// order events: "outbox.order.>" with the relay's default subject).
func BillingConsumer(ctx context.Context, js jetstream.JetStream, stream, name, filter string) (jetstream.Consumer, error) {
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:       name,
		FilterSubject: filter,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("create consumer %q on stream %s: %w", name, stream, err)
	}
	return cons, nil
}

// NewBilling returns the billing consumer: one invoice per order.created
// event, written in the transaction that records the event as processed,
// so a redelivered or duplicated message creates nothing more.
func NewBilling(pool *pgxpool.Pool, cons jetstream.Consumer, opts ...consumer.Option) (*consumer.Consumer, error) {
	return consumer.New(pool, cons, HandleOrderCreated, opts...)
}

// HandleOrderCreated is the billing handler: it invoices the order of an
// order.created event inside tx and ignores other events.
func HandleOrderCreated(ctx context.Context, tx pgx.Tx, m *consumer.Message) error {
	if m.EventType != EventType {
		return nil // not ours: recorded as processed and acknowledged
	}
	var o Order
	if err := json.Unmarshal(m.Data, &o); err != nil {
		return consumer.Permanent(fmt.Errorf("order.created payload: %w", err))
	}
	if o.ID == "" {
		return consumer.Permanent(errors.New("order.created payload has no order_id"))
	}
	_, err := tx.Exec(ctx, `INSERT INTO invoices (order_id, event_id, total) VALUES ($1, $2, $3)`, o.ID, m.ID, o.Total)
	return err // an error rolls back and retries later
}

// Consumed returns how many invoices the events with these ids created,
// by id; an id missing from the map was not consumed yet.
func Consumed(ctx context.Context, pool *pgxpool.Pool, eventIDs []string) (map[string]int, error) {
	rows, err := pool.Query(ctx, `SELECT event_id, count(*) FROM invoices WHERE event_id = ANY($1) GROUP BY event_id`, eventIDs)
	if err != nil {
		return nil, fmt.Errorf("read invoices: %w", err)
	}
	got := map[string]int{}
	var id string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error {
		got[id] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read invoices: %w", err)
	}
	return got, nil
}
