package poll

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/core"
	"github.com/outbox-relay/outbox-relay/internal/retry"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Poller is one polling relay process.
type Poller struct {
	cfg     Config
	deps    core.Deps
	log     zerolog.Logger
	poolCfg *pgxpool.Config
	q       queries // set by check: they depend on the table's columns
	cq      claimQueries
	class   int32
	metrics *metrics
	// byteaPayload says the payload column is bytea (text output is hex).
	byteaPayload bool
	notReady     atomic.Pointer[error]
}

// New checks cfg and returns a Poller ready to Run. deps are the relay's:
// the caller owns the NATS connection and closes it after Run.
func New(cfg Config, deps core.Deps) (*Poller, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := deps.Check("poll"); err != nil {
		return nil, err
	}
	poolCfg, _, err := replication.ParseConnString(cfg.PGURL)
	if err != nil {
		return nil, err
	}
	p := &Poller{cfg: cfg, deps: deps, log: deps.Log, poolCfg: poolCfg,
		cq: newClaimQueries(cfg.Table.Schema), class: lockClass(cfg.Table)}
	starting := errors.New("starting")
	p.notReady.Store(&starting)
	return p, nil
}

// Ready returns nil while the last poll succeeded and NATS is connected,
// or why not: what /readyz answers.
func (p *Poller) Ready() error {
	if err := *p.notReady.Load(); err != nil {
		return err
	}
	if !p.deps.NATS.IsConnected() {
		return errors.New("not connected to NATS")
	}
	return nil
}

func (p *Poller) setReady(err error) { p.notReady.Store(&err) }

// drainTimeout is how long stopping waits for the last batch's PubAcks.
func (p *Poller) drainTimeout() time.Duration {
	if d := p.cfg.DrainTimeout; d > 0 {
		return d
	}
	return replication.DefaultDrainTimeout
}

// Run polls until ctx ends or a fatal error:
//
//	outbox table ─batch: lock aggregates, read rows FOR UPDATE─▶ sink.Destination ─PubAcks─▶ processed_at, COMMIT
//	     ▲ NOTIFY (migrate --notify) or every Interval
//
// Cancelling ctx stops taking rows, waits up to the drain timeout for the
// current batch's PubAcks, commits what was acknowledged and returns nil.
func (p *Poller) Run(ctx context.Context) error {
	cfg, log := p.cfg, p.log
	log.Info().Str("table", cfg.Table.String()).Str("stream", cfg.Stream).Str("subject", cfg.Subject.String()).
		Int("batch", p.cfg.Batch).Dur("interval", p.cfg.Interval).Msg("starting outbox relay, polling the table")
	pool, err := core.OpenPool(ctx, p.poolCfg, log)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := p.check(ctx, pool); err != nil {
		return err
	}
	stream, err := core.OpenStream(ctx, p.deps, cfg.Publishing)
	if err != nil {
		return err
	}
	pc := cfg.PublisherConfig()
	record := core.RecordDeadLetter(checkpoint.NewStore(pool, cfg.Table.Schema, cfg.Slot))
	pc.RecordDeadLetter = record
	pc.Source = p.source(ctx, pool)
	pc.Tracer = p.deps.Tracer
	pub, err := stream.NewPublisher(pc, log.With().Str("component", "sink").Logger(), jetstream.NewMetrics(p.deps.Registry))
	if err != nil {
		return err
	}
	defer pub.Close()
	if p.metrics, err = newMetrics(p.deps.Registry); err != nil {
		return err
	}

	// The publisher's recovery loop and the listener run beside the polling
	// loop and stop after it: the last batch may still need recovery. A
	// publisher that fails stops the loop, and Run returns its error.
	bg := core.NewGroup(ctx)
	defer bg.Stop()
	bg.Go("publisher", pub.Run)
	wake := make(chan struct{}, 1)
	bg.Go("listener", func(ctx context.Context) error {
		listen(ctx, p.poolCfg.ConnConfig, migrations.Names{Table: cfg.Table}.NotifyChannel(), wake, log.With().Str("component", "listen").Logger())
		return nil
	})
	err = p.loop(bg.Context(), &batcher{p: p, pool: pool, pub: pub, stored: stream.Reader(nil), record: record}, wake)
	if cause := bg.Failure(); cause != nil && err == nil {
		err = cause
	}
	return err
}

// loop runs batches: at once after a full one, else on a notification or
// after Interval.
func (p *Poller) loop(ctx context.Context, b *batcher, wake <-chan struct{}) error {
	bo := retry.NewBackoff(200*time.Millisecond, p.cfg.Interval+5*time.Second)
	logs := retry.NewLogLimiter()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	failing := false
	for {
		start := time.Now()
		p.metrics.batches.Inc()
		n, full, err := b.run(ctx)
		if ctx.Err() != nil {
			return nil
		}
		wait := p.cfg.Interval
		switch {
		case err != nil:
			p.setReady(err)
			p.metrics.errors.Inc()
			if logs.Allow() {
				p.log.Error().Err(err).Msg("poll failed; retrying")
			}
			wait = bo.Next()
			failing = true
		case full:
			wait = 0
			fallthrough
		default:
			if failing {
				p.log.Info().Msg("polling works again")
				failing, logs = false, retry.NewLogLimiter()
			}
			p.setReady(nil)
			bo.Reset()
			if n > 0 {
				p.metrics.batch.Observe(time.Since(start).Seconds())
			}
		}
		if wait == 0 {
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
			p.metrics.wakeups.WithLabelValues("notify").Inc()
		case <-timer.C:
			p.metrics.wakeups.WithLabelValues("interval").Inc()
		}
		timer.Stop() // since Go 1.23 a stopped timer delivers no stale tick
	}
}

// check refuses a table without the polling columns or without what
// `migrate --source poll` adds (seq's default, the pending index), and one
// a WAL relay reads: it never sets processed_at, so polling would publish everything
// it published again.
func (p *Poller) check(ctx context.Context, pool *pgxpool.Pool) error {
	cfg := p.cfg
	cols, err := replication.Columns(ctx, pool, cfg.Table)
	if err != nil {
		return err
	}
	if len(cols) == 0 {
		return fmt.Errorf("table %s does not exist: run `outbox-relay migrate`", cfg.Table)
	}
	p.byteaPayload = cols["payload"] == "bytea"
	_, hasHeaders := cols[contract.ColumnHeaders]
	p.q = newQueries(cfg.Table, hasHeaders)
	var claims bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, pgx.Identifier{cfg.Table.Schema, ClaimsTable}.Sanitize()).Scan(&claims); err != nil {
		return fmt.Errorf("look for %s: %w", ClaimsTable, err)
	}
	if !claims {
		return fmt.Errorf("table %s.%s is missing, which polling needs: run `outbox-relay migrate`", cfg.Table.Schema, ClaimsTable)
	}
	for _, c := range append([]string{"id", "aggregate_type", "aggregate_id", "event_type", "payload", "created_at"}, bookkeeping...) {
		if _, ok := cols[c]; !ok {
			return fmt.Errorf("table %s has no column %s, which polling needs: run `outbox-relay migrate`", cfg.Table, c)
		}
	}
	names := migrations.Names{Table: cfg.Table}
	state, err := migrations.ReadPollState(ctx, pool, names)
	if err != nil {
		return err
	}
	if problem := state.Problem(names); problem != "" {
		return errors.New(problem)
	}
	var nullable []string
	rows, err := pool.Query(ctx, `SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass
		AND attname IN ('aggregate_type', 'aggregate_id') AND NOT attnotnull`, cfg.Table.Quoted())
	if err == nil {
		nullable, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return fmt.Errorf("read the columns of %s: %w", cfg.Table, err)
	}
	if len(nullable) > 0 {
		return fmt.Errorf("%s allows NULL in %v, and the polling relay orders rows by aggregate: run ALTER TABLE %s ALTER COLUMN ... SET NOT NULL (the seed's schema has NOT NULL)",
			cfg.Table, nullable, cfg.Table.Quoted())
	}
	var slot bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, cfg.Slot).Scan(&slot); err != nil {
		return fmt.Errorf("look for the WAL relay's slot %q: %w", cfg.Slot, err)
	}
	if slot {
		return fmt.Errorf("replication slot %q exists: a WAL relay reads %s and never sets processed_at, so polling would publish again every row it published; "+
			"stop the WAL relay and switch as docs/polling.md says (mark the rows the stream holds processed, drop the slot), or keep --source wal", cfg.Slot, cfg.Table)
	}
	return nil
}

// source is what the messages say they come from: the Postgres system and
// timeline, the database and table, and "poll:<table>" where the WAL relay
// puts its slot (never a slot name, so a WAL relay never takes these
// messages for its own slot's; by their table, a WAL relay's take-up
// knows the events they carry are in the stream). A
// role that may not read pg_control_* publishes without source headers.
func (p *Poller) source(ctx context.Context, pool *pgxpool.Pool) *sink.Stamp {
	var system, database string
	var timeline int64
	err := pool.QueryRow(ctx, `SELECT s.system_identifier::text, c.timeline_id, current_database() FROM pg_control_system() s, pg_control_checkpoint() c`).Scan(&system, &timeline, &database)
	if err != nil {
		p.log.Warn().Err(err).Msg("cannot read the Postgres system identifier: messages go out without the Outbox-Source-* headers")
		return nil
	}
	return sink.NewStamp(sink.Source{System: system, Timeline: uint32(timeline), Slot: "poll:" + p.cfg.Table.String(),
		Database: database, Table: p.cfg.Table.String()})
}
