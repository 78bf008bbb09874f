package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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
