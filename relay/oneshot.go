package relay

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/core"
	"github.com/outbox-relay/outbox-relay/replication"
)

// OneShot publishes a batch of events read from the table (verify
// --republish, dlq retry) with the relay's own publisher: same subjects,
// headers, ordering and dead-letter handling.
type OneShot struct {
	pub    *jetstream.Publisher
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	dead   map[string]string // events dead-lettered again, with the reason
}

// NewOneShot starts a publisher to stream for the subjects of cfg; call
// Finish when every event is offered. cfg.PGURL names the Postgres the
// events come from: the messages carry its source like the relay's own
// (Outbox-Source-* headers). Their position is the table's (commit LSN
// 0/0), outside any replay, so a relay never skips a replayed event
// because of them; and they carry Outbox-Replay: replay (one of
// contract.ReplayRepublish, contract.ReplayRetry), so the relay's tail
// search, which they would mislead (LSN 0 stored after later commits),
// passes over them.
func NewOneShot(ctx context.Context, stream *jetstream.Stream, cfg Config, store *checkpoint.Store, replay string, log zerolog.Logger) (*OneShot, error) {
	return newOneShot(ctx, stream, cfg, store, replay, core.RecordDeadLetter(store), log)
}

// newOneShot is NewOneShot with the dead letters recorded by record, or
// only remembered when it is nil (replay's copies: a copy dead-lettered is
// no event the relay failed to deliver, and `dlq retry` would publish it
// to the relay's subjects).
func newOneShot(ctx context.Context, stream *jetstream.Stream, cfg Config, store *checkpoint.Store, replay string,
	record func(context.Context, *decode.Event, string, string) error, log zerolog.Logger) (*OneShot, error) {
	src, err := oneShotSource(ctx, cfg, store, log)
	if err != nil {
		return nil, err
	}
	o := &OneShot{dead: map[string]string{}}
	pc := cfg.PublisherConfig()
	pc.Window, pc.WindowBytes, pc.AckTimeout = 0, 0, 0 // the defaults, whatever the relay's
	pc.Source = src.stampOrNil()
	pc.Replay = replay
	pc.RecordDeadLetter = func(ctx context.Context, ev *decode.Event, stored, reason string) error {
		o.mu.Lock()
		o.dead[core.DeadLetterKey(ev)] = reason
		o.mu.Unlock()
		if record == nil {
			return nil
		}
		return record(ctx, ev, stored, reason)
	}
	pub, err := stream.NewPublisher(pc, log, jetstream.NewMetrics(prometheus.NewRegistry()))
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

// oneShotSource identifies the Postgres system and, when the relay took its
// slot up, the slot's creation point.
func oneShotSource(ctx context.Context, cfg Config, store *checkpoint.Store, log zerolog.Logger) (*source, error) {
	_, repl, err := replication.ParseConnString(cfg.PGURL)
	if err != nil {
		return nil, err
	}
	src, err := newSource(ctx, repl, cfg.Slot, log)
	if err != nil {
		// IDENTIFY_SYSTEM needs the REPLICATION attribute and a free WAL
		// sender, which an operator's role may lack: such messages are
		// never used to skip an event, only consumers miss the headers.
		log.Warn().Err(err).Msg("cannot identify the Postgres system: publishing without the Outbox-Source-* headers")
		return nil, nil
	}
	return src.forTables(cfg.Tables()), src.slotTakenUp(ctx, store)
}

// Publish queues ev, waiting for room.
func (o *OneShot) Publish(ctx context.Context, ev *decode.Event) error {
	_, err := o.pub.Publish(ctx, ev)
	return err
}

// Rejects returns why ev cannot be published as it is, or "".
func (o *OneShot) Rejects(ev *decode.Event) string { return o.pub.Rejects(ev) }

// Finish waits until everything offered is stored, then stops.
func (o *OneShot) Finish(ctx context.Context) error {
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

// DeadLettered returns the reason the event with this dead-letter key
// (core.DeadLetterKey: its id, qualified by its table when the relay
// reads several) was dead-lettered again, if it was.
func (o *OneShot) DeadLettered(id string) (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r, ok := o.dead[id]
	return r, ok
}
