package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/devenv"
	"github.com/outbox-relay/outbox-relay/replication"
)

type benchCmd struct {
	PGURL    string        `name:"pg-url" env:"OUTBOX_PG_URL" help:"Postgres to measure (wal_level=logical; the role creates tables, publications and slots named bench_*). Default: a throwaway cluster."`
	NATSURL  string        `name:"nats-url" env:"OUTBOX_NATS_URL" help:"NATS to measure (JetStream enabled). Default: a nats-server in a process of its own."`
	Events   int           `name:"events" default:"200000" help:"Backlog size of the drain runs (R1) and of the limits (L1, L2)."`
	Big      int           `name:"big" default:"1000000" help:"Size of the resource runs (R3): a backlog and one transaction of this many events; 0 skips them."`
	Rates    string        `name:"rates" default:"1000,2500,5000" help:"Insert rates (events/s) of the latency runs (R2)."`
	Duration time.Duration `name:"duration" default:"10s" help:"Length of each latency run."`
	Baseline int           `name:"baseline" default:"20000" help:"Rows for the polling relay baseline (R4); 0 skips it."`
	Window   int           `name:"window" default:"4096" help:"The relay's --window."`
	// LatencyFile lets users plot a run: tails are easier to explain over time.
	LatencyFile string `name:"latency-file" type:"path" help:"Write every latency run's events as CSV (rate, stream sequence, commit and stored times in Unix µs, latency in µs) to this file."`
}

// bench holds what the measurements share.
type bench struct {
	cfg      benchCmd
	rates    []float64 // parsed --rates
	pool     *pgxpool.Pool
	repl     *pgconn.Config
	pgURL    string
	pgBinDir string
	natsURL  string
	nats     *child
	nc       *nats.Conn
	js       jetstream.JetStream
	self     string
	dir      string
	checked  int
	report   *benchReport
}

func (c *benchCmd) Run(ctx context.Context, log zerolog.Logger) error {
	rates, err := c.rates()
	if err != nil {
		return err
	}
	b := &bench{cfg: *c, rates: rates, report: &benchReport{}}
	if c.LatencyFile != "" {
		// The file holds this run only; runs append to it as they finish.
		if err := os.WriteFile(c.LatencyFile, nil, 0o644); err != nil {
			return fmt.Errorf("--latency-file: %w", err)
		}
	}
	cleanup, err := b.setup(ctx)
	defer cleanup()
	if err != nil {
		return err
	}
	steps := []func(context.Context) error{b.limitsAndDrains, b.latencies, b.resources, b.baseline}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			b.report.print(os.Stdout, b)
			return err
		}
	}
	b.report.print(os.Stdout, b)
	return nil
}

// rates parses --rates, refusing rates that would measure nothing.
func (c *benchCmd) rates() ([]float64, error) {
	var rates []float64
	for _, r := range strings.Split(c.Rates, ",") {
		if strings.TrimSpace(r) == "" {
			continue
		}
		rate, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
		if err != nil || rate <= 0 {
			return nil, fmt.Errorf("--rates: %q is not a rate", r)
		}
		if int(rate*c.Duration.Seconds())/writersFor(rate) < 1 {
			return nil, fmt.Errorf("--rates %s with --duration %s writes no events: raise one of them", r, c.Duration)
		}
		rates = append(rates, rate)
	}
	return rates, nil
}

// setup starts (or connects to) the servers.
func (b *bench) setup(ctx context.Context) (func(), error) {
	var closers []func()
	cleanup := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	var err error
	if b.self, err = os.Executable(); err != nil {
		return cleanup, err
	}
	if b.dir, err = os.MkdirTemp("", "outbox-relay-bench-"); err != nil {
		return cleanup, err
	}
	closers = append(closers, func() { os.RemoveAll(b.dir) })
	b.pgURL = b.cfg.PGURL
	if b.pgURL == "" {
		progress("starting a throwaway Postgres cluster (wal_level=logical, fsync on)")
		pg, err := devenv.StartPostgres(ctx, devenv.PostgresOptions{Settings: map[string]string{
			"max_wal_senders": "20", "max_replication_slots": "20", "track_commit_timestamp": "on",
			"shared_buffers": "'256MB'", "max_wal_size": "'8GB'", "checkpoint_timeout": "'30min'",
		}})
		if err != nil {
			return cleanup, err
		}
		closers = append(closers, func() { pg.Close() })
		b.pgURL, b.pgBinDir = pg.URL("postgres"), pg.BinDir()
	}
	b.natsURL = b.cfg.NATSURL
	if b.natsURL == "" {
		progress("starting nats-server (JetStream, file storage) in a process of its own")
		if b.nats, b.natsURL, err = startNATSProcess(b.dir); err != nil {
			return cleanup, err
		}
		closers = append(closers, func() { b.nats.stop() })
	}
	poolCfg, repl, err := replication.ParseConnString(b.pgURL)
	if err != nil {
		return cleanup, err
	}
	b.repl = repl
	if b.pool, err = pgxpool.NewWithConfig(ctx, poolCfg); err != nil {
		return cleanup, err
	}
	closers = append(closers, b.pool.Close)
	if b.nc, err = nats.Connect(b.natsURL); err != nil {
		return cleanup, err
	}
	closers = append(closers, b.nc.Close)
	b.js, err = jetstream.New(b.nc)
	return cleanup, err
}

func (b *bench) natsStat() (procStat, bool) {
	if b.nats == nil {
		return procStat{}, false
	}
	return readProc(b.nats.pid())
}

// limitsAndDrains measures, on one backlog each of one-row and ten-row
// transactions: pg_recvlogical (L1), the relay's receiver without
// publishing (L1), and the relay draining it (R1); and JetStream's limit
// for messages of the same size (L2).
func (b *bench) limitsAndDrains(ctx context.Context) error {
	for _, perTxn := range []int{1, 10} {
		sc, err := b.scenario(ctx, fmt.Sprintf("r1_%drow", perTxn))
		if err != nil {
			return err
		}
		end, err := b.backlog(ctx, sc, b.cfg.Events, perTxn, "recv_"+sc.name, "bare_"+sc.name)
		if err != nil {
			return err
		}
		label := fmt.Sprintf("%d-row transactions", perTxn)
		if perTxn == 1 {
			size := sc.payloadSize(ctx, b.pool)
			progress("L2: JetStream storing %d messages of ~%d bytes with Nats-Msg-Id, async window 1024", b.cfg.Events, size)
			took, err := jetStreamLimit(ctx, b.natsURL, b.cfg.Events, size)
			if err != nil {
				return err
			}
			b.report.add("L2", "JetStream publish limit (async, window 1024)", b.cfg.Events, took)
		}
		progress("L1: pg_recvlogical over %d events in %s", b.cfg.Events, label)
		recv, err := b.readerLimit(ctx, "pg_recvlogical, "+label, "recv_"+sc.name, func() (time.Duration, error) {
			return pgRecvlogical(ctx, b.pgBinDir, b.pgURL, "recv_"+sc.name, sc.names.publication, end)
		})
		if err != nil {
			return err
		}
		progress("L1: the relay's receiver and decoder, publishing off, over %s", label)
		if _, err := b.readerLimit(ctx, "relay receiver, no publishing, "+label, "bare_"+sc.name, func() (time.Duration, error) {
			return bareReceiver(ctx, b.pool, b.repl, "bare_"+sc.name, sc.names.publication, sc.names.table, b.cfg.Events)
		}); err != nil {
			return err
		}
		progress("R1: the relay draining %d events in %s", b.cfg.Events, label)
		r, err := b.drain(ctx, sc, b.cfg.Events, end)
		if err != nil {
			return err
		}
		b.report.addDrain("R1", "relay drain, "+label, r, recv)
	}
	return nil
}

// readerLimit runs one L1 reader over the backlog on slot, measuring the
// walsender that serves it, then drops the slot.
func (b *bench) readerLimit(ctx context.Context, what, slot string, read func() (time.Duration, error)) (*benchRow, error) {
	defer func() { _ = replication.DropSlot(context.WithoutCancel(ctx), b.pool, slot) }()
	watch := watchWalsender(ctx, b.pool, slot)
	took, err := read()
	walsnd, walsndKnown := watch()
	if err != nil {
		return nil, err
	}
	row := b.report.add("L1", what, b.cfg.Events, took)
	row.walsnd, row.walsndKnown = walsnd, walsndKnown
	return row, nil
}

// scenario returns a prepared scenario: its table, publication and
// procedures exist.
func (b *bench) scenario(ctx context.Context, name string) (scenario, error) {
	sc, err := newScenario(name)
	if err != nil {
		return sc, err
	}
	return sc, sc.prepare(ctx, b.pool)
}

// backlog writes n events into a prepared scenario whose relay slot (and
// extra reader slots) exist, while no relay runs. It returns the WAL
// position after them.

func (b *bench) backlog(ctx context.Context, sc scenario, n, perTxn int, readers ...string) (pglogrepl.LSN, error) {
	// One short run creates the relay's slot, as a first start would.
	relay, err := startChild(b.self, sc.relayArgs(b.pgURL, b.natsURL, b.cfg.Window), b.dir+"/relay-"+sc.name+"-init.log")
	if err != nil {
		return 0, err
	}
	if err := waitLogLine(ctx, b.dir+"/relay-"+sc.name+"-init.log", "streaming from the slot"); err != nil {
		relay.stop()
		return 0, err
	}
	if err := relay.stop(); err != nil {
		log, _ := os.ReadFile(b.dir + "/relay-" + sc.name + "-init.log")
		return 0, fmt.Errorf("first relay run: %w\n%s", err, log)
	}
	for _, slot := range readers {
		if err := createSlot(ctx, b.pool, slot); err != nil {
			return 0, err
		}
	}
	progress("writing %d events in %d-row transactions (the relay is stopped)", n, perTxn)
	started := time.Now()
	end, err := sc.fill(ctx, b.pool, n, perTxn)
	if err != nil {
		return 0, err
	}
	progress("  written in %s", time.Since(started).Round(10*time.Millisecond))
	sc.quiesce(ctx, b.pool)
	return end, nil
}

// latencies runs the fixed-rate latency measurements (R2).
func (b *bench) latencies(ctx context.Context) error {
	if len(b.rates) == 0 {
		return nil
	}
	sc, err := b.scenario(ctx, "r2")
	if err != nil {
		return err
	}
	for _, rate := range b.rates {
		progress("R2: commit-to-stream latency at %.0f events/s for %s", rate, b.cfg.Duration)
		r, err := b.latency(ctx, sc, rate, b.cfg.Duration)
		if err != nil {
			return err
		}
		b.report.latencies = append(b.report.latencies, r)
	}
	return nil
}

// resources measures CPU and memory on large drains (R3).
func (b *bench) resources(ctx context.Context) error {
	if b.cfg.Big == 0 {
		return nil
	}
	for _, run := range []struct {
		name   string
		perTxn int
		label  string
	}{{"r3_backlog", 1, "backlog of one-row transactions"}, {"r3_bigtxn", b.cfg.Big, "one transaction"}} {
		sc, err := b.scenario(ctx, run.name)
		if err != nil {
			return err
		}
		end, err := b.backlog(ctx, sc, b.cfg.Big, run.perTxn)
		if err != nil {
			return err
		}
		progress("R3: the relay draining %d events, %s", b.cfg.Big, run.label)
		r, err := b.drain(ctx, sc, b.cfg.Big, end)
		if err != nil {
			return err
		}
		b.report.addDrain("R3", fmt.Sprintf("relay drain, %d events, %s", b.cfg.Big, run.label), r, nil)
	}
	return nil
}

// baseline runs the seed article's polling relay (R4).
func (b *bench) baseline(ctx context.Context) error {
	if b.cfg.Baseline == 0 {
		return nil
	}
	sc, err := b.scenario(ctx, "r4")
	if err != nil {
		return err
	}
	if _, err := sc.fill(ctx, b.pool, b.cfg.Baseline, 1); err != nil {
		return err
	}
	progress("R4: the seed article's polling relay, one batch of 100 per one-second tick, for 5s")
	r, err := b.polling(ctx, sc, false, 5*time.Second)
	if err != nil {
		return err
	}
	b.report.polls = append(b.report.polls, r)
	progress("R4: the same relay looping until the table is empty on each tick")
	if r, err = b.polling(ctx, sc, true, 10*time.Minute); err != nil {
		return err
	}
	b.report.polls = append(b.report.polls, r)
	return nil
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
