package orders

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// Order is what CreateOrder stores: the seed article's order. Total is in
// cents, so that the event's payload carries an exact number.
type Order struct {
	ID         string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	Total      int64  `json:"total"`
}

// EventType is the type of the event CreateOrder writes and Billing
// handles; AggregateType is its aggregate.
const (
	EventType     = "order.created"
	AggregateType = "order"
)

// Schema creates the example's tables: the orders of the service and the
// invoices of the billing consumer. The outbox table and processed_events
// come from `outbox-relay migrate`.
const Schema = `
CREATE TABLE IF NOT EXISTS orders (
    id          TEXT        PRIMARY KEY,
    customer_id TEXT        NOT NULL,
    total       BIGINT      NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT NOW()
);
-- No unique key on order_id or event_id, on purpose: handling an event
-- twice would show as two rows. processed_events alone keeps it once.
CREATE TABLE IF NOT EXISTS invoices (
    id         BIGSERIAL   PRIMARY KEY,
    order_id   TEXT        NOT NULL,
    event_id   TEXT        NOT NULL,
    total      BIGINT      NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT NOW()
);`

// Migrate creates the example's tables unless they exist.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, Schema); err != nil {
		return fmt.Errorf("create the example's tables (orders, invoices): %w", err)
	}
	return nil
}

// Service is the order service.
type Service struct {
	pool   *pgxpool.Pool
	events *outbox.Writer
}

// NewService returns the order service on pool; the options are the
// outbox writer's (outbox.WithTable for another outbox table).
func NewService(pool *pgxpool.Pool, opts ...outbox.Option) (*Service, error) {
	w, err := outbox.NewWriter(opts...)
	if err != nil {
		return nil, err
	}
	return &Service{pool: pool, events: w}, nil
}

// CreateOrder is the seed article's CreateOrder: the order row and its
// order.created event commit together or not at all. It returns the
// event's id, which the relay publishes as the message's Nats-Msg-Id.
func (s *Service) CreateOrder(ctx context.Context, o Order) (eventID string, err error) {
	if o.ID == "" || o.CustomerID == "" {
		return "", errors.New("create order: id and customer_id are required")
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return "", fmt.Errorf("create order %s: begin: %w", o.ID, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // a no-op after Commit
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer_id, total) VALUES ($1, $2, $3)`,
		o.ID, o.CustomerID, o.Total); err != nil {
		return "", fmt.Errorf("create order %s: insert order: %w", o.ID, err)
	}
	ids, err := s.events.Write(ctx, tx, outbox.Event{
		AggregateType: AggregateType, AggregateID: o.ID, EventType: EventType, Payload: o,
	})
	if err != nil {
		return "", fmt.Errorf("create order %s: %w", o.ID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return "", fmt.Errorf("create order %s: commit: %w", o.ID, err)
	}
	return ids[0], nil
}
