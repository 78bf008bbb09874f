package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/sink"
)

// oneShot publishes a batch of events read from the table (verify
// --republish, dlq retry) with the relay's own publisher: same subjects,
// headers, ordering and dead-letter handling.
type oneShot struct {
	pub    *sink.Publisher
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	dead   map[string]string // events dead-lettered again, with the reason
}

func newOneShot(ctx context.Context, nc *nats.Conn, stream jetstream.Stream, n names, store *checkpoint.Store, log zerolog.Logger) (*oneShot, error) {
	o := &oneShot{dead: map[string]string{}}
	pub, err := sink.NewPublisher(nc, sink.Config{
		Subject: n.subject, DeadLetterSubject: n.deadLetter,
		MaxMessageSize: int(stream.CachedInfo().Config.MaxMsgSize),
		Stream:         stream, StartSeq: stream.CachedInfo().State.LastSeq,
		RecordDeadLetter: func(ctx context.Context, ev *decode.Event, reason string) error {
			o.mu.Lock()
			o.dead[ev.ID] = reason
			o.mu.Unlock()
			return store.RecordDeadLetter(ctx, deadLetterKey(ev), reason, ev.Position.CommitLSN)
		},
	}, log, sink.NewMetrics(prometheus.NewRegistry()))
	if err != nil {
		return nil, err
	}
	o.pub = pub
	rctx, cancel := context.WithCancel(ctx)
	o.cancel = cancel
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		_ = pub.Run(rctx)
	}()
	return o, nil
}

// offer queues ev, waiting for room.
func (o *oneShot) offer(ctx context.Context, ev *decode.Event) error {
	for {
		if _, ok := o.pub.Offer(ev); ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-o.pub.Room():
		}
	}
}

// finish waits until everything offered is stored, then stops.
func (o *oneShot) finish(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	err := o.pub.Drain(dctx)
	o.cancel()
	o.wg.Wait()
	o.pub.Close()
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	return nil
}

// deadLettered returns the reason ev's id was dead-lettered again, if it was.
func (o *oneShot) deadLettered(id string) (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r, ok := o.dead[id]
	return r, ok
}
