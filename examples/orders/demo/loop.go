package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/examples/orders/orders"
)

// loop is the demo's state: what was written, relayed and consumed.
type loop struct {
	svc       *orders.Service
	pool      *pgxpool.Pool
	out       io.Writer
	written   map[string]time.Time // event id: when its order was written
	pending   []string             // relayed, not consumed yet
	consumed  []string
	latencies []time.Duration // write→stream
	relayed   int
}

// run writes orders at c.Rate and follows each through the stream to its
// invoice, until c.Count were consumed, ctx ends, or the relay or the
// billing consumer stops.
func (l *loop) run(ctx context.Context, c Config, relayed <-chan jetstream.Msg, billingDone <-chan error) error {
	tick := time.NewTicker(time.Duration(float64(time.Second) / c.Rate))
	defer tick.Stop()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for c.Count == 0 || len(l.consumed) < c.Count {
		select {
		case <-ctx.Done():
			return nil
		case err := <-c.RelayDone:
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

// write creates the n-th demo order with its event.
func (l *loop) write(ctx context.Context, n int) error {
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	o := orders.Order{ID: "ord-" + hex.EncodeToString(id), CustomerID: fmt.Sprintf("customer-%d", n%3+1), Total: int64(1099 + n%90*100)}
	started := time.Now()
	eventID, err := l.svc.CreateOrder(ctx, o)
	if err != nil {
		return err
	}
	l.written[eventID] = started
	fmt.Fprintf(l.out, "written   event %s  order %s of %s, %d.%02d: order row and outbox row in one transaction\n",
		eventID, o.ID, o.CustomerID, o.Total/100, o.Total%100)
	return nil
}

// relay records an event seen in the stream, with its write→stream latency.
func (l *loop) relay(m jetstream.Msg) {
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
	fmt.Fprintf(l.out, "relayed   event %s  subject %s  lsn %s  write→stream %s\n", id, m.Subject(), m.Headers().Get(contract.HeaderCommitLSN), latency)
	l.showCloudEvent(m)
}

// showCloudEvent prints the CloudEvent a message in that form carries
// (relay --format cloudevents): its attributes as a CloudEvents reader
// decodes them from the ce- headers, then its data.
func (l *loop) showCloudEvent(m jetstream.Msg) {
	h := m.Headers()
	if h.Get(contract.HeaderCESpecVersion) == "" {
		return
	}
	var names []string
	for k := range h {
		if strings.HasPrefix(k, contract.CEPrefix) {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	fmt.Fprintf(l.out, "          cloudevent (binary mode, NATS binding)\n")
	for _, k := range names {
		v, err := contract.CEDecode(h.Get(k))
		if err != nil {
			v = fmt.Sprintf("%q (%v)", h.Get(k), err)
		}
		fmt.Fprintf(l.out, "            %-17s %s\n", strings.TrimPrefix(k, contract.CEPrefix)+":", v)
	}
	fmt.Fprintf(l.out, "            %-17s %s\n", "data:", m.Data())
}

// poll prints the relayed events the billing consumer has invoiced.
func (l *loop) poll(ctx context.Context) error {
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
			fmt.Fprintf(l.out, "consumed  event %s  once: one invoice, recorded in processed_events as %q\n", id, billingConsumer)
		default:
			return fmt.Errorf("event %s was consumed %d times", id, n)
		}
	}
	l.pending = still
	return nil
}

// checkOnce checks, at the end, that every consumed event still made
// exactly one invoice: a late redelivery would show here.
func (l *loop) checkOnce(ctx context.Context) error {
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

// summary prints the counts and the write→stream latencies.
func (l *loop) summary() {
	fmt.Fprintf(l.out, "\n%d orders written, %d events relayed, %d consumed once", len(l.written), l.relayed, len(l.consumed))
	if len(l.latencies) == 0 {
		fmt.Fprintln(l.out)
		return
	}
	sorted := slices.Clone(l.latencies)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	q := func(p float64) time.Duration { return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))] }
	fmt.Fprintf(l.out, "; write→stream p50 %s, p99 %s, max %s\n",
		q(0.5).Round(10*time.Microsecond), q(0.99).Round(10*time.Microsecond), sorted[len(sorted)-1].Round(10*time.Microsecond))
}
