// Package demo is the loop `outbox-relay dev` shows beside the relay it
// runs: the example order service (package orders) writes orders, an
// ordered consumer sees each event reach the stream, and the billing
// consumer invoices each once. It prints a line per stage, each with the
// event id, and a summary at the end:
//
//	written   the order and its outbox row committed in one transaction (orders.Service.CreateOrder)
//	relayed   the event is in the stream (an ordered consumer watches it)
//	consumed  the billing consumer made exactly one invoice of it (orders.NewBilling, processed_events)
package demo

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/consumer"
	"github.com/outbox-relay/outbox-relay/examples/orders/orders"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
)

// billingConsumer is the durable consumer the demo's billing runs as.
const billingConsumer = "dev-billing"

// Config is what the demo needs: the database and NATS of a running relay.
type Config struct {
	// Pool is the relay's database, migrated for the relay and for the
	// example (orders.Migrate).
	Pool    *pgxpool.Pool
	NATSURL string
	// Relay names the outbox table, the stream and its subjects.
	Relay relay.Config
	// Rate is the orders written per second.
	Rate float64
	// Count stops the demo once this many orders were consumed; 0 runs it
	// until its context ends.
	Count int
	// RelayDone yields the relay's error should it stop first.
	RelayDone <-chan error
	// Out receives the demo's lines.
	Out io.Writer
}

// Run writes orders at c.Rate until c.Count of them were consumed or ctx
// ends, then checks that every consumed event made exactly one invoice and
// prints the summary.
func Run(ctx context.Context, c Config) error {
	n := c.Relay
	svc, err := orders.NewService(c.Pool, outbox.WithTable(n.Table.String()))
	if err != nil {
		return err
	}
	nc, err := nats.Connect(c.NATSURL, nats.Name("outbox-relay dev"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	stream, err := waitForStream(ctx, js, n.Stream, c.RelayDone)
	if err != nil {
		return err
	}
	watch, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{n.Subject.Filter()}, DeliverPolicy: jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return fmt.Errorf("watch stream %q: %w", n.Stream, err)
	}
	relayed := make(chan jetstream.Msg, 64)
	cc, err := watch.Consume(func(m jetstream.Msg) { relayed <- m })
	if err != nil {
		return err
	}
	defer cc.Stop()

	billingDone, stopBilling, err := startBilling(ctx, c.Pool, js, n)
	if err != nil {
		return err
	}
	defer func() {
		stopBilling()
		<-billingDone
	}()

	fmt.Fprintf(c.Out, "\nwriting %v orders/s with the example order service (examples/orders): each commits an order row and its outbox row in one transaction; the billing consumer invoices each event once. Ctrl-C stops and cleans up.\n\n", c.Rate)
	l := &loop{svc: svc, pool: c.Pool, out: c.Out, written: map[string]time.Time{}}
	err = l.run(ctx, c, relayed, billingDone)
	if err == nil {
		err = l.checkOnce(context.WithoutCancel(ctx))
	}
	l.summary()
	return err
}

// waitForStream waits until the relay has created the stream.
func waitForStream(ctx context.Context, js jetstream.JetStream, name string, relayDone <-chan error) (jetstream.Stream, error) {
	for {
		stream, err := js.Stream(ctx, name)
		if err == nil {
			return stream, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case err := <-relayDone:
			return nil, fmt.Errorf("the relay stopped: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startBilling runs the example's billing consumer until stop is called.
func startBilling(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, n relay.Config) (<-chan error, func(), error) {
	cons, err := orders.BillingConsumer(ctx, js, n.Stream, billingConsumer, n.Subject.Filter())
	if err != nil {
		return nil, nil, err
	}
	billing, err := orders.NewBilling(pool, cons, consumer.WithSchema(n.Table.Schema))
	if err != nil {
		return nil, nil, err
	}
	bctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- billing.Run(bctx) }()
	return done, stop, nil
}
