package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// The seed article's CreateOrder with pgx: the order and its events commit
// in one transaction, and the relay publishes the events once committed.
func ExampleWrite() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	type OrderCreated struct {
		OrderID    string `json:"order_id"`
		CustomerID string `json:"customer_id"`
		Total      int    `json:"total"`
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) // a no-op after Commit
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer_id, total) VALUES ($1, $2, $3)`, "ord-1", "cust-7", 120); err != nil {
		log.Fatal(err)
	}
	ids, err := outbox.Write(ctx, tx,
		outbox.Event{AggregateType: "order", AggregateID: "ord-1", EventType: "order.created",
			Payload: OrderCreated{OrderID: "ord-1", CustomerID: "cust-7", Total: 120}},
		outbox.Event{AggregateType: "customer", AggregateID: "cust-7", EventType: "customer.ordered",
			Payload: []byte(`{"order_id":"ord-1"}`)},
	)
	if err != nil {
		log.Fatal(err) // nothing was sent: tx is still usable
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("events written:", len(ids))

	// What the relay will publish, in this order, each with Nats-Msg-Id = its id.
	for _, id := range ids {
		var eventType string
		var payload []byte
		if err := pool.QueryRow(ctx, `SELECT event_type, payload::text FROM outbox_events WHERE id = $1`, id).Scan(&eventType, &payload); err != nil {
			log.Fatal(err)
		}
		fmt.Println(eventType, string(payload))
	}

	// Invalid input is refused before anything is sent, with an error to
	// branch on.
	_, err = outbox.Write(ctx, pool, outbox.Event{AggregateType: "order", AggregateID: "ord-2", EventType: "order.created",
		Payload: []byte(`{"total": 12`)})
	if errors.Is(err, outbox.ErrInvalidPayload) {
		fmt.Println("refused:", err)
	}
	// Output:
	// events written: 2
	// order.created {"total": 120, "order_id": "ord-1", "customer_id": "cust-7"}
	// customer.ordered {"order_id": "ord-1"}
	// refused: outbox event 0 (order.created): payload is not JSON: unexpected end of JSON input at byte 12: invalid outbox payload
}

// Table-less events: the same events as logical messages in the caller's
// transaction, nothing stored in a table. The relay (Postgres 14+, its
// --message-prefix the Writer's, "outbox" by default) publishes them like
// rows once the transaction commits; a rollback discards them.
func ExampleEmit() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) // a no-op after Commit
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer_id, total) VALUES ($1, $2, $3)`, "ord-3", "cust-7", 80); err != nil {
		log.Fatal(err)
	}
	ids, err := outbox.Emit(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: "ord-3", EventType: "order.created",
		Payload: map[string]any{"order_id": "ord-3", "total": 80}})
	if err != nil {
		log.Fatal(err) // nothing was sent: tx is still usable
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE id::text = $1`, ids[0]).Scan(&rows); err != nil {
		log.Fatal(err)
	}
	fmt.Println("events emitted:", len(ids), "rows in the outbox table:", rows)
	// Output:
	// events emitted: 1 rows in the outbox table: 0
}
