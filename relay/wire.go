package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/core"
	"github.com/outbox-relay/outbox-relay/internal/startup"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/jetstream"
)

// The relay's wiring to its destination: the only place, with the
// one-shot publisher (oneshot.go), that names the JetStream
// implementation. Everything else sees a sink.Destination to publish to
// and a sink.Reader of what it holds.

// takenUp is what the start-up protocol leaves for streaming.
type takenUp struct {
	pool    *pgxpool.Pool
	record  *pgxpool.Pool       // the primary's, with --primary-url
	repl    *replication.Opened // the first session's connection, if opened ahead
	pub     sink.Destination
	starter *starter
	pipe    *pipeline
	action  checkpoint.Action
}

func (t *takenUp) close() {
	t.repl.Close(context.Background())
	if t.pub != nil {
		t.pub.Close()
	}
	if t.record != nil {
		closePool(t.record)
	}
	closePool(t.pool)
}

// poolCloseWait bounds how long stopping waits for the pool's connections
// to close. With Postgres unreachable pgx waits up to 15 s per connection
// for a cancel request nobody answers; nothing is left to say to Postgres
// by then (the final status update went out or was given up), so the
// relay exits rather than wait, and the closing goes on until the
// process ends.
const poolCloseWait = time.Second

func closePool(pool *pgxpool.Pool) {
	closed := make(chan struct{})
	go func() {
		pool.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(poolCloseWait):
	}
}

// takeUp connects, checks the setup, provisions the stream, starts the
// publisher in bg and takes up the slot: resume, create (publishing the
// rows already in the table) or repair it, or refuse.
//
// Steps that wait on different servers or connections overlap: the
// stream is provisioned in NATS, and the replication connection is
// opened and identified, while Postgres is connected to; the setup's
// check runs beside the take-up's first reads, on a connection of its
// own, and is waited for before the take-up acts (see starter.checked);
// the take-up lock's connection is opened beside them too. The take-up
// itself (the lock, then the slot, the record and the stream read in that
// order) is unchanged. A setup problem is reported before any failure
// after it, as when the check ran first.
func (r *Relay) takeUp(ctx context.Context, bg *core.Group) (up *takenUp, err error) {
	cfg, log := r.cfg, r.deps.Log
	repl := runAhead(ctx, func(ctx context.Context) (*replication.Opened, error) {
		defer startup.Phase(ctx, "repl_open")()
		return replication.Open(ctx, r.replCfg)
	})
	streamAhead := runAhead(ctx, func(ctx context.Context) (*jetstream.Stream, error) {
		defer startup.Phase(ctx, "nats_stream")()
		return core.OpenStream(ctx, r.deps, cfg.Publishing)
	})
	var opened *replication.Opened
	var checked *ahead[struct{}]
	defer func() {
		if err != nil && checked != nil {
			// A setup problem explains most failures after it (a role
			// without REPLICATION cannot open the replication connection).
			if _, cerr := checked.wait(); cerr != nil {
				err = cerr
			}
		}
		if checked != nil {
			checked.discard(nil)
		}
		streamAhead.discard(nil)
		repl.discard(func(o *replication.Opened) { o.Close(ctx) })
		if up == nil || up.repl == nil {
			opened.Close(ctx) // not handed to the session
		}
	}()
	end := startup.Phase(ctx, "pg_pool")
	pool, err := core.OpenPool(ctx, r.poolCfg, log)
	end()
	if err != nil {
		return nil, err
	}
	up = &takenUp{pool: pool}
	record := pool
	if r.primaryCfg != nil {
		end := startup.Phase(ctx, "primary_pool")
		up.record, err = core.OpenPool(ctx, r.primaryCfg, log)
		end()
		if err != nil {
			return up, err
		}
		record = up.record
	}
	lockConn := runAhead(ctx, func(ctx context.Context) (*pgx.Conn, error) {
		defer startup.Phase(ctx, "lock_connect")()
		return takeUpConn(ctx, record, cfg.Slot)
	})
	defer lockConn.discard(closeConn) // unless the starter took it
	checked = runAhead(ctx, func(ctx context.Context) (struct{}, error) {
		defer startup.Phase(ctx, "setup_check")()
		if err := replication.CheckTables(ctx, pool, cfg.Tables(), cfg.Publication); err != nil {
			return struct{}{}, err
		}
		for _, t := range cfg.Tables() {
			warnForeignHeaders(ctx, pool, t, log)
		}
		return struct{}{}, nil
	})
	stream, err := streamAhead.wait()
	if err != nil {
		return up, err
	}
	store := checkpoint.NewStore(record, cfg.Table.Schema, cfg.Slot).WithTable(cfg.Table, cfg.MoreTables...)
	if opened, err = repl.wait(); err != nil {
		// Tried before Postgres answered: OpenPool waits for it, Open
		// does not. Once more, now that it does.
		end := startup.Phase(ctx, "repl_open")
		opened, err = replication.Open(ctx, r.replCfg)
		end()
		if err != nil {
			return up, err
		}
	}
	src, err := newSourceFrom(opened.System(), r.replCfg, cfg.Slot, log.With().Str("component", "source").Logger())
	if err != nil {
		return up, err
	}
	src.forTables(cfg.Tables())
	if up.pub, err = r.newPublisher(ctx, stream, store, src.stamp); err != nil {
		return up, err
	}
	bg.Go("publisher", up.pub.Run)
	skipped := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "outbox_relay_events_skipped_total",
		Help: "Replayed events not published again because they were handed over or stored already.",
	})
	if err := r.deps.Registry.Register(skipped); err != nil {
		return up, fmt.Errorf("register metrics: %w", err)
	}
	// The starter reads the stream back as this relay's: its source.
	up.starter = &starter{cfg: cfg, pool: pool, record: record, repl: r.replCfg, reader: stream.Reader(src.stamp), store: store, pub: up.pub, skipped: skipped, log: log, lockConn: lockConn, checked: checked,
		closeRepl: func() { opened.Close(ctx); opened = nil }}
	if up.pipe, up.action, err = up.starter.start(ctx); err != nil {
		return up, err
	}
	up.pipe.source = src
	// The slot's creation point, as the take-up left it in the record.
	src.setOrigin(up.starter.origin)
	// A quick take-up (no slot created, nothing published from the table)
	// hands the connection opened meanwhile to the first session; a slot's
	// creation, or a wait for another instance's take-up, closed it
	// (closeRepl), and the session dials anew.
	up.repl = opened
	return up, nil
}

// newPublisher returns the relay's publisher to stream: the shared
// publishing settings, the relay's source on every message, dead letters
// recorded in the relay's store, and the start-up trace ended at the first
// PubAck.
func (r *Relay) newPublisher(ctx context.Context, stream *jetstream.Stream, store *checkpoint.Store, stamp *sink.Stamp) (*jetstream.Publisher, error) {
	cfg := r.cfg.PublisherConfig()
	cfg.RecordDeadLetter = core.RecordDeadLetter(store)
	cfg.Source = stamp
	cfg.Tracer = r.deps.Tracer
	// Only the WAL's transactions are published atomically: PublisherConfig
	// leaves it off for the other sources, which have none.
	cfg.Atomic = r.cfg.AtomicTransactions
	trace := startup.FromContext(ctx)
	cfg.FirstStored = func() { trace.Finish("first PubAck") }
	return stream.NewPublisher(cfg, r.deps.Log.With().Str("component", "sink").Logger(), jetstream.NewMetrics(r.deps.Registry))
}
