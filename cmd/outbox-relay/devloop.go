package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/consumer"
	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/examples/orders/orders"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
)

// devConsumer is the durable consumer dev's billing runs as.
const devConsumer = "dev-billing"

// demo runs the example order service's whole loop and prints a line per
// stage, each with the event id:
//
//	written   the order and its outbox row committed in one transaction (orders.Service.CreateOrder)
//	relayed   the event is in the stream (an ordered consumer watches it)
//	consumed  the billing consumer made exactly one invoice of it (orders.NewBilling, processed_events)
func (c *devCmd) demo(ctx context.Context, pool *pgxpool.Pool, natsURL string, n relay.Config, relayDone <-chan error) error {
	svc, err := orders.NewService(pool, outbox.WithTable(n.Table.String()))
	if err != nil {
		return err
	}
	nc, err := nats.Connect(natsURL, nats.Name("outbox-relay dev"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	stream, err := waitForStream(ctx, js, n.Stream, relayDone)
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

	billingDone, stopBilling, err := startBilling(ctx, pool, js, n)
	if err != nil {
		return err
	}
	defer func() {
		stopBilling()
		<-billingDone
	}()

	fmt.Printf("\nwriting %v orders/s with the example order service (examples/orders): each commits an order row and its outbox row in one transaction; the billing consumer invoices each event once. Ctrl-C stops and cleans up.\n\n", c.Rate)
	l := &devLoop{svc: svc, pool: pool, written: map[string]time.Time{}}
	err = l.run(ctx, c, relayed, relayDone, billingDone)
	if err == nil {
		err = l.checkOnce(context.WithoutCancel(ctx))
	}
	l.summary()
	return err
}

// startBilling runs the example's billing consumer until stop is called.
func startBilling(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, n relay.Config) (<-chan error, func(), error) {
	cons, err := orders.BillingConsumer(ctx, js, n.Stream, devConsumer, n.Subject.Filter())
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

// devLoop is the demo's state: what was written, relayed and consumed.
type devLoop struct {
	svc       *orders.Service
	pool      *pgxpool.Pool
	written   map[string]time.Time // event id: when its order was written
	pending   []string             // relayed, not consumed yet
	consumed  []string
	latencies []time.Duration // write→stream
	relayed   int
}

func (l *devLoop) run(ctx context.Context, c *devCmd, relayed <-chan jetstream.Msg, relayDone, billingDone <-chan error) error {
	tick := time.NewTicker(time.Duration(float64(time.Second) / c.Rate))
	defer tick.Stop()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for c.Count == 0 || len(l.consumed) < c.Count {
		select {
		case <-ctx.Done():
			return nil
		case err := <-relayDone:
			return fmt.Errorf("the relay stopped: %w", err)
		case err := <-billingDone:
			return fmt.Errorf("the billing consumer stopped: %w", err)
		case <-tick.C:
			if c.Count == 0 || len(l.written) < c.Count {
				if err := l.write(ctx, len(l.written)); err != nil {
					return err
				}
			}
		case m := <-relayed:
			l.relay(m)
		case <-poll.C:
			if err := l.poll(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

func (l *devLoop) write(ctx context.Context, n int) error {
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	o := orders.Order{ID: "ord-" + hex.EncodeToString(id), CustomerID: fmt.Sprintf("customer-%d", n%3+1), Total: int64(1099 + n%90*100)}
	started := time.Now()
	eventID, err := l.svc.CreateOrder(ctx, o)
	if err != nil {
		return err
	}
	l.written[eventID] = started
	fmt.Printf("written   event %s  order %s of %s, %d.%02d: order row and outbox row in one transaction\n",
		eventID, o.ID, o.CustomerID, o.Total/100, o.Total%100)
	return nil
}

func (l *devLoop) relay(m jetstream.Msg) {
	id := m.Headers().Get(contract.HeaderMsgID)
	latency := "?"
	if started, ok := l.written[id]; ok {
		if meta, err := m.Metadata(); err == nil {
			lat := meta.Timestamp.Sub(started)
			l.latencies = append(l.latencies, lat)
			latency = fmt.Sprintf("%.1f ms", float64(lat.Microseconds())/1000)
		}
		l.pending = append(l.pending, id)
	}
	l.relayed++
	fmt.Printf("relayed   event %s  subject %s  lsn %s  write→stream %s\n", id, m.Subject(), m.Headers().Get(contract.HeaderCommitLSN), latency)
}

// poll prints the relayed events the billing consumer has invoiced.
func (l *devLoop) poll(ctx context.Context) error {
	if len(l.pending) == 0 {
		return nil
	}
	got, err := orders.Consumed(ctx, l.pool, l.pending)
	if err != nil {
		return err
	}
	var still []string
	for _, id := range l.pending {
		switch n := got[id]; {
		case n == 0:
			still = append(still, id)
		case n == 1:
			l.consumed = append(l.consumed, id)
			fmt.Printf("consumed  event %s  once: one invoice, recorded in processed_events as %q\n", id, devConsumer)
		default:
			return fmt.Errorf("event %s was consumed %d times", id, n)
		}
	}
	l.pending = still
	return nil
}

// checkOnce checks, at the end, that every consumed event still made
// exactly one invoice: a late redelivery would show here.
func (l *devLoop) checkOnce(ctx context.Context) error {
	if len(l.consumed) == 0 {
		return nil
	}
	got, err := orders.Consumed(ctx, l.pool, l.consumed)
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range l.consumed {
		if got[id] != 1 {
			errs = append(errs, fmt.Errorf("event %s made %d invoices", id, got[id]))
		}
	}
	return errors.Join(errs...)
}

func (l *devLoop) summary() {
	fmt.Printf("\n%d orders written, %d events relayed, %d consumed once", len(l.written), l.relayed, len(l.consumed))
	if len(l.latencies) == 0 {
		fmt.Println()
		return
	}
	sorted := slices.Clone(l.latencies)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	q := func(p float64) time.Duration { return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))] }
	fmt.Printf("; write→stream p50 %s, p99 %s, max %s\n",
		q(0.5).Round(10*time.Microsecond), q(0.99).Round(10*time.Microsecond), sorted[len(sorted)-1].Round(10*time.Microsecond))
}
