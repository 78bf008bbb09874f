package relay

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/core"
	"github.com/outbox-relay/outbox-relay/internal/startup"
	"github.com/outbox-relay/outbox-relay/replication"
)

// Relay is one relay process: it takes up its slot, then streams until its
// context ends or a fatal error.
type Relay struct {
	cfg     Config
	deps    core.Deps
	poolCfg *pgxpool.Config
	replCfg *pgconn.Config
	// primaryCfg is --primary-url's pool (nil without it: the record is
	// kept in the database the relay streams from).
	primaryCfg *pgxpool.Config
	wal        atomic.Pointer[replication.Stream] // set once streaming can start
	notReady   atomic.Pointer[error]
}

// New checks cfg and returns a relay ready to Run.
func New(cfg Config, deps core.Deps) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := deps.Check("relay"); err != nil {
		return nil, err
	}
	poolCfg, replCfg, err := replication.ParseConnString(cfg.PGURL)
	if err != nil {
		return nil, err
	}
	r := &Relay{cfg: cfg, deps: deps, poolCfg: poolCfg, replCfg: replCfg}
	if cfg.PrimaryURL != "" {
		if r.primaryCfg, err = replication.ParsePrimaryConnString(cfg.PrimaryURL); err != nil {
			return nil, err
		}
		if err := replication.CheckOneHost(replCfg); err != nil {
			return nil, err
		}
	}
	starting := errors.New("starting")
	r.notReady.Store(&starting)
	return r, nil
}

// Ready returns nil while the relay is connected to NATS and either streams
// from its slot or waits as a healthy standby (Postgres answered within
// seconds that another instance holds the slot), or why not: what /readyz
// answers. A standby counts as ready so that an active/standby pair can
// be rolled: the new instance becomes ready as the standby, the old one
// stops, and the standby takes over.
func (r *Relay) Ready() error {
	wal := r.wal.Load()
	switch {
	case wal == nil:
		return *r.notReady.Load()
	case !r.deps.NATS.IsConnected():
		return errors.New("not connected to NATS")
	case !wal.Streaming() && !wal.Standby():
		return errors.New("neither streaming from the replication slot nor waiting for it as a standby (is Postgres reachable?)")
	}
	return nil
}

// Run runs the relay until ctx ends or a fatal error:
//
//	Postgres WAL ─pgoutput─▶ replication.Stream ─decode.Event─▶ pipeline ─▶ sink.Destination ─PubAck─▶ checkpoint.Tracker
//	     ▲                                                                                                 │
//	     └──────────── standby status update: flush LSN, written to checkpoint.Ledger first ◀──────────────┘
//
// The stream runs on this goroutine; the publisher's recovery loop, the
// slot monitor and the confirmation gate run beside it and stop after it.
// Cancelling ctx drains in-flight publishes, sends the final status update
// and returns nil.
func (r *Relay) Run(ctx context.Context) error {
	cfg, log := r.cfg, r.deps.Log
	ev := log.Info().Str("postgres", replication.Describe(r.replCfg)).Str("slot", cfg.Slot).Str("table", contract.JoinTables(cfg.Tables())).
		Str("stream", cfg.Stream).Str("subject", cfg.Subject.String())
	if r.primaryCfg != nil {
		ev = ev.Str("primary", replication.Describe(&r.primaryCfg.ConnConfig.Config))
	}
	ev.Msg("starting outbox relay")

	bg := core.NewGroup(ctx)
	defer bg.Stop()
	up, err := r.takeUp(ctx, bg)
	if up != nil {
		defer up.close()
	}
	if err != nil {
		return err
	}
	st, pipe, pool := up.starter, up.pipe, up.pool
	pipe.trace = startup.FromContext(ctx)
	replMetrics := replication.NewMetrics(r.deps.Registry)
	wal, err := replication.NewStream(replication.Config{
		Repl:           r.replCfg,
		Slot:           cfg.Slot,
		Publication:    cfg.Publication,
		Table:          cfg.Table,
		MoreTables:     cfg.MoreTables,
		MessagePrefix:  cfg.MessagePrefix,
		Failover:       cfg.Failover,
		StatusInterval: cfg.StatusInterval,
		DrainTimeout:   cfg.DrainTimeout,
		HeldToCommit:   r.cfg.AtomicTransactions,
		BeforeSession:  st.beforeSession(pipe),
		Stopped:        st.stopped(pipe),
	}, pool, log.With().Str("component", "replication").Logger(), replMetrics)
	if err != nil {
		return err
	}
	monitor := replication.NewMonitor(pool, cfg.Slot, 5*time.Second, log.With().Str("component", "monitor").Logger(), replMetrics)
	bg.Go("slot monitor", afterFirstSession(wal, monitor.Run))
	dead, err := newDeadLetterGauge(r.deps.Registry, st.store, deadLetterEvery, log.With().Str("component", "monitor").Logger())
	if err != nil {
		return err
	}
	bg.Go("dead-letter count", afterFirstSession(wal, dead.Run))
	idle, err := newIdleSlotsGauge(r.deps.Registry, st.store, pool, log.With().Str("component", "monitor").Logger())
	if err != nil {
		return err
	}
	bg.Go("idle slots", afterFirstSession(wal, idle.Run))
	bg.Go("confirmation gate", afterFirstSession(wal, pipe.gate.Run))
	r.wal.Store(wal)

	wal.UseFirst(up.repl)
	up.repl = nil
	err = wal.Run(bg.Context(), pipe)
	if cause := bg.Failure(); cause != nil && err == nil {
		err = cause
	}
	return err
}

// afterFirstSession runs run once the stream's first session streams or
// ended: the readers in the background (the slot's metrics, the
// dead-letter count, the confirmation gate's checks) would otherwise query
// Postgres beside the session's own start, and make it wait for a new
// connection of the pool. The gate confirms nothing before then anyway:
// the session confirms nothing new until it streams.
func afterFirstSession(wal *replication.Stream, run func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		select {
		case <-wal.FirstSession():
		case <-ctx.Done():
			return nil
		}
		return run(ctx)
	}
}
