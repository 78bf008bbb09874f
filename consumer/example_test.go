package consumer_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver of database/sql, for ExampleNewSQL
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/consumer"
)

// A billing service consuming the relay's order events: each order.created
// creates one invoice, however often the message is delivered.
func ExampleNew() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	nc, err := nats.Connect(os.Getenv("NATS_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	// A durable pull consumer with explicit acks and no MaxDeliver: the
	// helper decides when to give up, after recording the event.
	cons, err := js.CreateOrUpdateConsumer(ctx, "OUTBOX", jetstream.ConsumerConfig{
		Durable:       "billing",
		FilterSubject: "outbox.order.>",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}

	handle := func(ctx context.Context, tx pgx.Tx, m *consumer.Message) error {
		if m.EventType != "order.created" {
			return nil // not ours: acknowledged, recorded as processed
		}
		var order struct {
			OrderID string `json:"order_id"`
			Total   int    `json:"total"`
		}
		if err := json.Unmarshal(m.Data, &order); err != nil {
			return consumer.Permanent(err) // retrying will not help
		}
		if order.OrderID == "" {
			return consumer.Permanent(errors.New("order_id missing"))
		}
		_, err := tx.Exec(ctx, `INSERT INTO invoices (order_id, total) VALUES ($1, $2)`, order.OrderID, order.Total)
		return err // an error rolls back and retries later
	}
	c, err := consumer.New(pool, cons, handle, consumer.WithMaxDeliveries(5), consumer.WithBackoff(time.Second, time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(ctx); err != nil { // returns nil after SIGTERM, once drained
		log.Fatal(err)
	}
}

// The same billing service on database/sql: the handler writes through the
// *sql.Tx that also records the event in processed_events.
func ExampleNewSQL() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL")) // or "postgres" with lib/pq
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	nc, err := nats.Connect(os.Getenv("NATS_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "OUTBOX", jetstream.ConsumerConfig{
		Durable:       "billing",
		FilterSubject: "outbox.order.>",
		AckPolicy:     jetstream.AckExplicitPolicy,
	})
	if err != nil {
		log.Fatal(err)
	}

	handle := func(ctx context.Context, tx *sql.Tx, m *consumer.Message) error {
		if m.EventType != "order.created" {
			return nil
		}
		var order struct {
			OrderID string `json:"order_id"`
			Total   int    `json:"total"`
		}
		if err := json.Unmarshal(m.Data, &order); err != nil {
			return consumer.Permanent(err)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_id, total) VALUES ($1, $2)`, order.OrderID, order.Total)
		return err
	}
	c, err := consumer.NewSQL(db, cons, handle,
		consumer.WithMaxDeliveries(5),
		consumer.WithSQLTxOptions(sql.TxOptions{Isolation: sql.LevelRepeatableRead}))
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
