package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/buildinfo"
	"github.com/outbox-relay/outbox-relay/internal/core"
	"github.com/outbox-relay/outbox-relay/internal/telemetry"
	"github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/startup"
	"github.com/outbox-relay/outbox-relay/relay"
)

type runCmd struct {
	pgFlags      `embed:"" set:"pg_url_help=Postgres connection string (URL or key=value); the replication connection is derived from it. Use sslmode=verify-full across networks."`
	primaryFlags `embed:""`
	natsFlags    `embed:""`
	nameFlags    `embed:"" set:"slot_help=Logical replication slot (created on first start)." set:"stream_help=JetStream stream (created when missing)." set:"duplicate_window_help=Dedup window of a stream the relay creates."`
	formatFlags  `embed:""`
	streamFlags  `embed:""`
	relayFlags   `embed:""`
	pollFlags    `embed:""`
}

// AfterApply reads the connection strings given in files. Both embedded
// flag sets have one to run: kong calls only a promoted AfterApply, and two
// would promote none.
func (c *runCmd) AfterApply() error {
	if err := c.pgFlags.AfterApply(); err != nil {
		return err
	}
	return c.primaryFlags.readFile()
}

// relayFlags tune the running relay.
type relayFlags struct {
	Window         int               `name:"window" env:"OUTBOX_WINDOW" default:"${window}" help:"Most events awaiting a PubAck at once."`
	WindowBytes    contract.ByteSize `name:"window-bytes" env:"OUTBOX_WINDOW_BYTES" default:"${window_bytes}" help:"Most payload bytes awaiting PubAcks at once (e.g. 64MiB, 1GB)."`
	AckTimeout     time.Duration     `name:"ack-timeout" env:"OUTBOX_ACK_TIMEOUT" default:"${ack_timeout}" help:"How long a PubAck may take before the event is republished."`
	StatusInterval time.Duration     `name:"status-interval" env:"OUTBOX_STATUS_INTERVAL" default:"${status_interval}" help:"Longest time between status updates to Postgres; capped at half the server's wal_sender_timeout."`
	DrainTimeout   time.Duration     `name:"drain-timeout" env:"OUTBOX_DRAIN_TIMEOUT" default:"${drain_timeout}" help:"How long shutdown waits for in-flight publishes."`
	MetricsAddr    string            `name:"metrics-addr" env:"OUTBOX_METRICS_ADDR" default:"${metrics_addr}" help:"Address for /metrics, /healthz and /readyz; empty disables."`
	RecreateSlot   bool              `name:"recreate-slot" help:"Repair a gap, once: drop the slot, create a new one and publish from its snapshot every committed row the stream lacks (by id), then stream."`
	RepairSince    time.Time         `name:"repair-since" format:"2006-01-02T15:04:05Z07:00" help:"With --recreate-slot, only compare rows created at or after this time (RFC 3339)."`
	MessagePrefix  string            `name:"message-prefix" env:"OUTBOX_MESSAGE_PREFIX" default:"${message_prefix}" help:"Prefix of table-less events: transactional pg_logical_emit_message calls (outbox.Emit) with it are relayed like outbox rows (Postgres 14+); empty turns them off."`
	Failover       bool              `name:"failover" env:"OUTBOX_FAILOVER" help:"Make the slot a failover slot (Postgres 17+; an existing slot is altered): standbys with sync_replication_slots = on keep a copy, so the relay goes on from a promoted standby. Give --pg-url every host and target_session_attrs=read-write; see docs/failover.md."`
	MaxProcs       int               `name:"max-procs" env:"OUTBOX_MAX_PROCS" default:"1" help:"Go processors (GOMAXPROCS) the relay runs on; its work is one pipeline, and on a shared machine one processor saves the hand-offs between cores; 0 uses every processor."`
	AtomicTx       bool              `name:"atomic-transactions" env:"OUTBOX_ATOMIC_TRANSACTIONS" help:"Publish the events of each Postgres transaction (up to 1000) as one JetStream atomic batch, stored all or none (nats-server 2.12+, a stream with allow_atomic; a stream the relay creates gets it). Larger transactions go out as ordinary messages marked Outbox-Atomic-Fallback. See docs/guarantees.md."`
	FastIngest     string            `name:"fast-ingest" env:"OUTBOX_FAST_INGEST" default:"auto" enum:"auto,off" help:"auto publishes in fast-ingest batches (one flow ack per few events) when the server (nats-server 2.14+) and the stream (allow_batched) allow it, and each event with its own PubAck otherwise; off always does the latter."`
	FastLinger     time.Duration     `name:"fast-ingest-linger" env:"OUTBOX_FAST_INGEST_LINGER" default:"1ms" help:"With fast ingest, how long a batch stays open with nothing to send before the relay commits it (its last events are confirmed then): longer batches cost less per event and delay the confirmation of the last ones; keep it well under the server's batch timeout (10s)."`
	CPUProfile     string            `name:"cpu-profile" env:"OUTBOX_CPU_PROFILE" help:"Write a Go CPU profile of the whole run to this file ({pid} becomes the process id), for performance work."`
}

func (f relayFlags) validate() error {
	switch {
	case f.Window < 1 || f.Window > 1<<16:
		return fmt.Errorf("--window %d: use 1 to 65536", f.Window)
	case f.WindowBytes < 1<<20:
		return fmt.Errorf("--window-bytes %s: use at least 1MiB", f.WindowBytes)
	case f.AckTimeout < 100*time.Millisecond:
		return fmt.Errorf("--ack-timeout %s: use at least 100ms", f.AckTimeout)
	case f.StatusInterval < 100*time.Millisecond:
		return fmt.Errorf("--status-interval %s: use at least 100ms", f.StatusInterval)
	case f.DrainTimeout < 0:
		return fmt.Errorf("--drain-timeout %s: must not be negative", f.DrainTimeout)
	case f.FastLinger < 100*time.Microsecond || f.FastLinger > 5*time.Second:
		return fmt.Errorf("--fast-ingest-linger %s: use 100µs to 5s", f.FastLinger)
	case f.MaxProcs < 0:
		return fmt.Errorf("--max-procs %d: use 1 or more, or 0 for every processor", f.MaxProcs)
	}
	return nil
}

func (c *runCmd) config() (relay.Config, error) {
	n, err := c.nameFlags.parse()
	if err != nil {
		return relay.Config{}, err
	}
	if err := c.relayFlags.validate(); err != nil {
		return relay.Config{}, err
	}
	if n.format, err = c.formatFlags.parse(c.PGURL, n.table, n.more...); err != nil {
		return relay.Config{}, err
	}
	cfg := n.relayConfig()
	if cfg.StreamSettings, err = c.streamFlags.settings(); err != nil {
		return relay.Config{}, err
	}
	cfg.PGURL = c.PGURL
	if c.PrimaryURL != "" && c.Source == sourcePoll {
		return relay.Config{}, errPrimaryWithPoll
	}
	if c.Source == sourcePoll {
		if err := n.oneTable("run --source poll", pollOneTable); err != nil {
			return relay.Config{}, err
		}
	}
	cfg.PrimaryURL = c.PrimaryURL
	cfg.Window, cfg.WindowBytes, cfg.AckTimeout = c.Window, int(c.WindowBytes), c.AckTimeout
	cfg.FastIngest, cfg.FastLinger = jetstream.FastIngest(c.FastIngest), c.FastLinger
	cfg.StatusInterval, cfg.DrainTimeout = c.StatusInterval, c.DrainTimeout
	cfg.Repair, cfg.RepairSince = c.RecreateSlot, c.RepairSince
	cfg.MessagePrefix = c.MessagePrefix
	cfg.Failover = c.Failover
	if c.AtomicTx && c.Source == sourcePoll {
		return relay.Config{}, errors.New("--atomic-transactions works with --source wal only: polling reads rows, not transactions")
	}
	cfg.AtomicTransactions = c.AtomicTx
	return cfg, nil
}

func (c *runCmd) Run(ctx context.Context, log zerolog.Logger) error {
	cfg, err := c.config()
	if err != nil {
		return err
	}
	if c.CPUProfile != "" {
		f, err := os.Create(strings.ReplaceAll(c.CPUProfile, "{pid}", strconv.Itoa(os.Getpid())))
		if err != nil {
			return fmt.Errorf("--cpu-profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpu-profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	// The live heap is small and bounded by the window: trading a little
	// memory for a third of the collections is worth it at WAL speed.
	debug.SetGCPercent(300)
	if c.MaxProcs > 0 {
		runtime.GOMAXPROCS(c.MaxProcs)
	}
	serve := serveRelay
	if c.Source == sourcePoll {
		serve = c.pollFlags.serve
	}
	if err := serve(ctx, cfg, c.natsFlags.options(), c.MetricsAddr, log); err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			log.Info().Msg("stopped during start-up, as asked")
			return nil
		}
		return err
	}
	log.Info().Msg("stopped")
	return nil
}

// serveRelay connects to NATS, serves /metrics, /healthz and /readyz, and
// runs the relay until ctx ends or a fatal error. The metrics server
// outlives the relay's drain, so a scrape sees the final figures.
func serveRelay(ctx context.Context, cfg relay.Config, natsOpts jetstream.NATSOptions, metricsAddr string, log zerolog.Logger) error {
	return serve(ctx, natsOpts, metricsAddr, log, func(deps core.Deps) (runner, error) { return relay.New(cfg, deps) })
}

// runner is a relay serveRelay can run: the WAL relay or the polling one.
type runner interface {
	Run(ctx context.Context) error
	Ready() error
}

// serve runs the relay build returns, with NATS, the metrics server and,
// when the OTEL_* variables ask for it, tracing.
func serve(ctx context.Context, natsOpts jetstream.NATSOptions, metricsAddr string, log zerolog.Logger, build func(core.Deps) (runner, error)) error {
	bi := buildinfo.Read()
	tracing, err := startTracing(ctx, log, bi.Version)
	if err != nil {
		return err
	}
	// Deferred first, so it runs last: after the relay's drain, whose
	// PubAcks end the last spans.
	defer stopTracing(ctx, tracing, log)
	reg := prometheus.NewRegistry()
	reg.MustRegister(bi.Collector())
	health := newHealth()
	var srv *metricsServer
	if metricsAddr != "" {
		if srv, err = newMetricsServer(metricsAddr, reg, health, log); err != nil {
			return err
		}
	}
	end := startup.Phase(ctx, "nats_connect")
	nc, err := jetstream.ConnectNATS(natsOpts, "outbox-relay", log)
	end()
	if err != nil {
		return err
	}
	defer nc.Close()
	r, err := build(core.Deps{NATS: nc, Registry: reg, Log: log, Tracer: tracing.Provider()})
	if err != nil {
		return err
	}
	health.setReady(r.Ready)
	if srv != nil {
		sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		served := make(chan error, 1)
		go func() { served <- srv.Run(sctx) }()
		defer func() {
			stop()
			if err := <-served; err != nil {
				log.Warn().Err(err).Msg("metrics server stopped")
			}
		}()
	}
	return r.Run(ctx)
}

// startTracing sets up tracing as the OTEL_* variables ask (off when they
// do not; see internal/telemetry).
func startTracing(ctx context.Context, log zerolog.Logger, version string) (*telemetry.Tracing, error) {
	tracing, err := telemetry.FromEnv(ctx, os.Getenv, version)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	if tracing.Provider() != nil {
		log.Info().Msg("tracing: a span per event, exported over OTLP/HTTP as the OTEL_* variables say")
	}
	return tracing, nil
}

// stopTracing flushes the spans still queued, within
// telemetry.ShutdownTimeout: a collector that is down costs the relay's
// exit that long at most, and its spans.
func stopTracing(ctx context.Context, tracing *telemetry.Tracing, log zerolog.Logger) {
	if err := tracing.Shutdown(ctx); err != nil {
		log.Warn().Err(err).Msg("tracing: spans not flushed at shutdown")
	}
}
