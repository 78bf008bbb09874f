package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/retry"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/sink"
)

// relayConfig is everything the relay needs, parsed and validated.
type relayConfig struct {
	pgURL          string
	nats           natsFlags
	names          names
	window         int
	windowBytes    int
	ackTimeout     time.Duration
	statusInterval time.Duration
	drainTimeout   time.Duration
	metricsAddr    string
	recreateSlot   bool
	repairSince    time.Time
}

// runRelay wires the relay and runs it until ctx ends or a fatal error:
//
//	Postgres WAL ─pgoutput─▶ replication.Stream ─decode.Event─▶ pipeline ─▶ sink.Publisher ─PubAck─▶ checkpoint.Tracker
//	     ▲                                                                                                 │
//	     └──────────── standby status update: flush LSN, written to checkpoint.Ledger first ◀──────────────┘
//
// The stream runs on this goroutine; the publisher's recovery loop, the
// slot monitor and the metrics server run beside it and stop after it.
func runRelay(ctx context.Context, cfg relayConfig, log zerolog.Logger, reg *prometheus.Registry) error {
	poolCfg, replCfg, err := replication.ParseConnString(cfg.pgURL)
	if err != nil {
		return err
	}
	log.Info().Str("postgres", replication.Describe(replCfg)).Str("nats", redactNATS(cfg.nats.NATSURL)).
		Str("slot", cfg.names.slot).Str("table", cfg.names.table.String()).Str("stream", cfg.names.stream).
		Str("subject", cfg.names.subject.String()).Msg("starting outbox relay")

	health := newHealth()
	bg := newGroup(ctx, log)
	defer bg.stop()
	if cfg.metricsAddr != "" {
		srv, err := newMetricsServer(cfg.metricsAddr, reg, health, log)
		if err != nil {
			return err
		}
		bg.goRun("metrics server", srv.Run)
	}

	pool, err := openPool(ctx, poolCfg, log)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := replication.Check(ctx, pool, cfg.names.table, cfg.names.publication); err != nil {
		return err
	}

	nc, err := connectNATS(ctx, cfg.nats, "outbox-relay", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("open JetStream: %w", err)
	}
	stream, err := ensureStream(ctx, nc, js, cfg, log)
	if err != nil {
		return err
	}

	store := checkpoint.NewStore(pool, cfg.names.table.Schema, cfg.names.slot)
	sinkMetrics := sink.NewMetrics(reg)
	pub, err := sink.NewPublisher(nc, sink.Config{
		Subject:           cfg.names.subject,
		DeadLetterSubject: cfg.names.deadLetter,
		Window:            cfg.window,
		WindowBytes:       cfg.windowBytes,
		AckTimeout:        cfg.ackTimeout,
		MaxMessageSize:    int(stream.CachedInfo().Config.MaxMsgSize),
		Stream:            stream,
		StartSeq:          stream.CachedInfo().State.LastSeq,
		RecordDeadLetter: func(ctx context.Context, ev *decode.Event, reason string) error {
			return store.RecordDeadLetter(ctx, deadLetterKey(ev), reason, ev.Position.CommitLSN)
		},
	}, log.With().Str("component", "sink").Logger(), sinkMetrics)
	if err != nil {
		return err
	}
	defer pub.Close()
	bg.goRun("publisher", pub.Run)

	skipped := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "outbox_relay_events_skipped_total",
		Help: "Replayed events not published again because they were handed over or stored already.",
	})
	reg.MustRegister(skipped)
	st := &starter{cfg: cfg, pool: pool, repl: replCfg, stream: stream, store: store, pub: pub, skipped: skipped, log: log}
	pipe, err := st.start(ctx)
	if err != nil {
		return err
	}

	replMetrics := replication.NewMetrics(reg)
	wal, err := replication.NewStream(replication.Config{
		Repl:           replCfg,
		Slot:           cfg.names.slot,
		Publication:    cfg.names.publication,
		Table:          cfg.names.table,
		StatusInterval: cfg.statusInterval,
		DrainTimeout:   cfg.drainTimeout,
		BeforeSession:  st.beforeSession(pipe),
	}, pool, log.With().Str("component", "replication").Logger(), replMetrics)
	if err != nil {
		return err
	}
	monitor := replication.NewMonitor(pool, cfg.names.slot, 5*time.Second, log.With().Str("component", "monitor").Logger(), replMetrics)
	bg.goRun("slot monitor", monitor.Run)
	bg.goRun("confirmation gate", pipe.gate.Run)
	health.setReady(func() error {
		switch {
		case !wal.Streaming():
			return errors.New("not streaming from the replication slot")
		case !nc.IsConnected():
			return errors.New("not connected to NATS")
		}
		return nil
	})

	err = wal.Run(bg.ctx, pipe)
	if cause := bg.failure(); cause != nil && err == nil {
		err = cause
	}
	return err
}

// openPool connects to Postgres, waiting while it is unreachable; bad
// credentials or a missing database fail at once.
func openPool(ctx context.Context, cfg *pgxpool.Config, log zerolog.Logger) (*pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", replication.Describe(&cfg.ConnConfig.Config), err)
	}
	bo := retry.NewBackoff(200*time.Millisecond, 5*time.Second)
	logs := retry.NewLogLimiter()
	for {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = pool.Ping(pctx)
		cancel()
		if err == nil {
			return pool, nil
		}
		var pe *pgconn.PgError
		if errors.As(err, &pe) && (pe.Code == "28P01" || pe.Code == "28000" || pe.Code == "3D000") {
			pool.Close()
			return nil, fmt.Errorf("connect to %s: %w", replication.Describe(&cfg.ConnConfig.Config), err)
		}
		if logs.Allow() {
			log.Warn().Err(err).Str("postgres", replication.Describe(&cfg.ConnConfig.Config)).Msg("Postgres is not reachable yet; retrying")
		}
		select {
		case <-ctx.Done():
			pool.Close()
			return nil, context.Cause(ctx)
		case <-time.After(bo.Next()):
		}
	}
}

// deadLetterKey names a dead-lettered event in Postgres: its id, or its WAL
// position when it has no usable id.
func deadLetterKey(ev *decode.Event) string {
	if decode.CheckID(ev.ID) != "" {
		return ev.Position.String()
	}
	return ev.ID
}

// ensureStream provisions the stream, waiting while NATS or JetStream is
// unavailable; a stream that does not fit is a fatal error.
func ensureStream(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, cfg relayConfig, log zerolog.Logger) (jetstream.Stream, error) {
	spec := sink.StreamSpec{
		Name:              cfg.names.stream,
		Template:          cfg.names.subject,
		DeadLetterSubject: cfg.names.deadLetter,
		DuplicateWindow:   cfg.names.duplicateWindow,
	}
	bo := retry.NewBackoff(200*time.Millisecond, 5*time.Second)
	logs := retry.NewLogLimiter()
	for {
		if err := waitConnected(ctx, nc, cfg.nats.NATSURL, log); err != nil {
			return nil, err
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := sink.EnsureStream(sctx, js, spec, log)
		var stream jetstream.Stream
		if err == nil {
			stream, err = js.Stream(sctx, spec.Name)
		}
		cancel()
		if err == nil || errors.Is(err, sink.ErrStreamConfig) {
			return stream, err
		}
		if logs.Allow() {
			log.Warn().Err(err).Str("stream", spec.Name).Msg("JetStream not available yet; retrying")
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(bo.Next()):
		}
	}
}

// group runs background components beside the stream. They stop when the
// relay stops; one that fails stops the relay.
type group struct {
	ctx    context.Context // the stream's context: cancelled by a failure
	cancel context.CancelCauseFunc
	bgCtx  context.Context // the components' context: cancelled by stop
	bgStop context.CancelFunc
	wg     sync.WaitGroup
	log    zerolog.Logger
}

func newGroup(parent context.Context, log zerolog.Logger) *group {
	g := &group{log: log}
	g.ctx, g.cancel = context.WithCancelCause(parent)
	// Background components outlive the stream's context: the publisher
	// must keep receiving PubAcks while the stream drains at shutdown.
	g.bgCtx, g.bgStop = context.WithCancel(context.WithoutCancel(parent))
	return g
}

func (g *group) goRun(name string, run func(context.Context) error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := run(g.bgCtx); err != nil && g.bgCtx.Err() == nil {
			g.cancel(fmt.Errorf("%s: %w", name, err))
		}
	}()
}

// failure returns why a background component stopped the relay, if one did.
func (g *group) failure() error {
	if err := context.Cause(g.ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func (g *group) stop() {
	g.bgStop()
	g.wg.Wait()
	g.cancel(nil)
}
