package relay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/startup"
	"github.com/outbox-relay/outbox-relay/replication"
)

// Relay is one relay process: it takes up its slot, then streams until its
// context ends or a fatal error.
type Relay struct {
	cfg     Config
	nc      *nats.Conn
	reg     prometheus.Registerer
	log     zerolog.Logger
	poolCfg *pgxpool.Config
	replCfg *pgconn.Config
	// primaryCfg is --primary-url's pool (nil without it: the record is
	// kept in the database the relay streams from).
	primaryCfg *pgxpool.Config
	wal        atomic.Pointer[replication.Stream] // set once streaming can start
	notReady   atomic.Pointer[error]
}

// Deps are what the relay is given rather than builds: a NATS connection
// (the caller owns it and closes it after Run), the registry its metrics go
// to, and its logger.
type Deps struct {
	NATS     *nats.Conn
	Registry prometheus.Registerer
	Log      zerolog.Logger
}

// New checks cfg and returns a relay ready to Run.
func New(cfg Config, deps Deps) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.NATS == nil {
		return nil, errors.New("relay: no NATS connection")
	}
	if deps.Registry == nil {
		deps.Registry = prometheus.NewRegistry()
	}
	poolCfg, replCfg, err := replication.ParseConnString(cfg.PGURL)
	if err != nil {
		return nil, err
	}
	r := &Relay{cfg: cfg, nc: deps.NATS, reg: deps.Registry, log: deps.Log, poolCfg: poolCfg, replCfg: replCfg}
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
	case !r.nc.IsConnected():
		return errors.New("not connected to NATS")
	case !wal.Streaming() && !wal.Standby():
		return errors.New("neither streaming from the replication slot nor waiting for it as a standby (is Postgres reachable?)")
	}
	return nil
}

// Run runs the relay until ctx ends or a fatal error:
//
//	Postgres WAL ─pgoutput─▶ replication.Stream ─decode.Event─▶ pipeline ─▶ jssink.Publisher ─PubAck─▶ checkpoint.Tracker
//	     ▲                                                                                                 │
//	     └──────────── standby status update: flush LSN, written to checkpoint.Ledger first ◀──────────────┘
//
// The stream runs on this goroutine; the publisher's recovery loop, the
// slot monitor and the confirmation gate run beside it and stop after it.
// Cancelling ctx drains in-flight publishes, sends the final status update
// and returns nil.
func (r *Relay) Run(ctx context.Context) error {
	cfg, log := r.cfg, r.log
	ev := log.Info().Str("postgres", replication.Describe(r.replCfg)).Str("slot", cfg.Slot).Str("table", cfg.Table.String()).
		Str("stream", cfg.Stream).Str("subject", cfg.Subject.String())
	if r.primaryCfg != nil {
		ev = ev.Str("primary", replication.Describe(&r.primaryCfg.ConnConfig.Config))
	}
	ev.Msg("starting outbox relay")

	bg := newGroup(ctx)
	defer bg.stop()
	up, err := r.takeUp(ctx, bg)
	if up != nil {
		defer up.close()
	}
	if err != nil {
		return err
	}
	st, pipe, pool := up.starter, up.pipe, up.pool
	pipe.trace = startup.FromContext(ctx)
	replMetrics := replication.NewMetrics(r.reg)
	wal, err := replication.NewStream(replication.Config{
		Repl:           r.replCfg,
		Slot:           cfg.Slot,
		Publication:    cfg.Publication,
		Table:          cfg.Table,
		MessagePrefix:  cfg.MessagePrefix,
		Failover:       cfg.Failover,
		StatusInterval: cfg.StatusInterval,
		DrainTimeout:   cfg.DrainTimeout,
		BeforeSession:  st.beforeSession(pipe),
	}, pool, log.With().Str("component", "replication").Logger(), replMetrics)
	if err != nil {
		return err
	}
	monitor := replication.NewMonitor(pool, cfg.Slot, 5*time.Second, log.With().Str("component", "monitor").Logger(), replMetrics)
	bg.goRun("slot monitor", afterFirstSession(wal, monitor.Run))
	dead, err := newDeadLetterGauge(r.reg, st.store, deadLetterEvery, log.With().Str("component", "monitor").Logger())
	if err != nil {
		return err
	}
	bg.goRun("dead-letter count", afterFirstSession(wal, dead.Run))
	bg.goRun("confirmation gate", afterFirstSession(wal, pipe.gate.Run))
	r.wal.Store(wal)

	wal.UseFirst(up.repl)
	up.repl = nil
	err = wal.Run(bg.ctx, pipe)
	if cause := bg.failure(); cause != nil && err == nil {
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

// takenUp is what the start-up protocol leaves for streaming.
type takenUp struct {
	pool    *pgxpool.Pool
	record  *pgxpool.Pool       // the primary's, with --primary-url
	repl    *replication.Opened // the first session's connection, if opened ahead
	pub     *jssink.Publisher
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
func (r *Relay) takeUp(ctx context.Context, bg *group) (up *takenUp, err error) {
	cfg, log := r.cfg, r.log
	repl := runAhead(ctx, func(ctx context.Context) (*replication.Opened, error) {
		defer startup.Phase(ctx, "repl_open")()
		return replication.Open(ctx, r.replCfg)
	})
	streamAhead := runAhead(ctx, func(ctx context.Context) (jetstream.Stream, error) {
		defer startup.Phase(ctx, "nats_stream")()
		return EnsureStream(ctx, r.nc, cfg.streamSpec(), log)
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
	pool, err := OpenPool(ctx, r.poolCfg, log)
	end()
	if err != nil {
		return nil, err
	}
	up = &takenUp{pool: pool}
	record := pool
	if r.primaryCfg != nil {
		end := startup.Phase(ctx, "primary_pool")
		up.record, err = OpenPool(ctx, r.primaryCfg, log)
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
		if err := replication.Check(ctx, pool, cfg.Table, cfg.Publication); err != nil {
			return struct{}{}, err
		}
		warnForeignHeaders(ctx, pool, cfg.Table, log)
		return struct{}{}, nil
	})
	stream, err := streamAhead.wait()
	if err != nil {
		return up, err
	}
	store := checkpoint.NewStore(record, cfg.Table.Schema, cfg.Slot)
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
	src, err := newSourceFrom(opened.System(), r.replCfg, cfg.Slot, r.nc, log.With().Str("component", "source").Logger())
	if err != nil {
		return up, err
	}
	if up.pub, err = jssink.NewPublisher(r.nc, cfg.sinkConfig(stream, store, src.stamp, startup.FromContext(ctx)), log.With().Str("component", "sink").Logger(), jssink.NewMetrics(r.reg)); err != nil {
		return up, err
	}
	bg.goRun("publisher", up.pub.Run)
	skipped := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "outbox_relay_events_skipped_total",
		Help: "Replayed events not published again because they were handed over or stored already.",
	})
	if err := r.reg.Register(skipped); err != nil {
		return up, fmt.Errorf("register metrics: %w", err)
	}
	// The starter reads the stream as this relay's (jssink.WithSource).
	up.starter = &starter{cfg: cfg, pool: pool, record: record, repl: r.replCfg, stream: jssink.WithSource(stream, src.stamp), store: store, pub: up.pub, skipped: skipped, log: log, lockConn: lockConn, checked: checked,
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

// deadLetterKey names a dead-lettered event in Postgres: its id as the row
// holds it, also when a Nats-Msg-Id cannot carry it (whitespace), so that
// the dead-letter view and `dlq retry` find its row; its WAL position only
// when it has no id at all.
func deadLetterKey(ev *decode.Event) string {
	if ev.ID == "" {
		return ev.Position.String()
	}
	return ev.ID
}

// recordDeadLetter returns the sink's callback that records a dead letter
// in Postgres.
func recordDeadLetter(store *checkpoint.Store) func(context.Context, *decode.Event, string) error {
	return func(ctx context.Context, ev *decode.Event, reason string) error {
		return store.RecordDeadLetter(ctx, deadLetterKey(ev), reason, ev.Position.CommitLSN)
	}
}

// streamInfo is what the publisher needs of the stream at start.
func streamLimits(stream jetstream.Stream) (maxMsgSize int, lastSeq uint64) {
	info := stream.CachedInfo()
	return int(info.Config.MaxMsgSize), info.State.LastSeq
}
