// Package bench measures the relay against the machine's limits, in one
// run: how fast Postgres's own pg_recvlogical, the relay's receiver alone
// and JetStream alone go (L1, L2), what the message's headers cost
// JetStream (L2S), the relay draining backlogs (R1),
// commit-to-stream latency at fixed insert rates (R2), CPU and memory on
// large drains (R3), and a polling relay for comparison (R4); on request,
// one relay of two tables against two (T1) and one slot against two that
// split a table (S1). The targets of issue 23 are checked against the
// run's own figures (targets.go). Every relay run ends with verify's
// table-vs-stream check.
//
// The relay under test is the outbox-relay program itself (Options.Self),
// started as a child process per run, so its CPU time and memory are its
// own. Without a Postgres URL the benchmark starts a throwaway cluster
// (devenv: the server binaries must be installed); without a NATS URL it
// runs a nats-server in a process of its own (natsproc: the program's main
// must call natsproc.ServeIfAsked). CPU and memory are read from /proc
// (Linux), and only for processes on this machine.
//
// Progress goes to Options.Progress as it happens; the tables go to
// Options.Out at the end, also when a measurement failed.
package bench

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
	"github.com/outbox-relay/outbox-relay/internal/lab/natsproc"
	"github.com/outbox-relay/outbox-relay/replication"
)

// Options are the benchmark's settings: the bench command's flags, and
// what the command passes in.
type Options struct {
	// PGURL is the Postgres to measure (wal_level=logical; the role creates
	// tables, publications and slots named bench_*); empty starts a
	// throwaway cluster.
	PGURL string
	// NATSURL is the NATS to measure (JetStream enabled); empty starts a
	// nats-server in a process of its own.
	NATSURL string
	// Events is the backlog size of the drain runs (R1) and the limits.
	Events int
	// Big is the size of the resource runs (R3); 0 skips them.
	Big int
	// Cold is the backlog size of the cold-start drains (C1), at most
	// Events; 0 skips them.
	Cold int
	// Rates are the insert rates (events/s) of the latency runs (R2),
	// comma-separated.
	Rates string
	// Duration is the length of each latency run.
	Duration time.Duration
	// Baseline is the row count of the polling baseline (R4); 0 skips it.
	Baseline int
	// Tables is the backlog of each of two tables in the several-tables
	// comparison (T1): one relay reading both against two relays reading
	// one each; 0 skips it.
	Tables int
	// Split is the backlog of the one-slot against two-slots comparison
	// (S1): one table read through one slot, and through two slots whose
	// publications split it with row filters (Postgres 15+); 0 skips it.
	Split int
	// Only, when set, names the measurements to run, comma-separated:
	// limits (L1, L2, R1), cold (C1), latency (R2), resources (R3),
	// baseline (R4), tables (T1), split (S1).
	Only string
	// Window is the relay's --window.
	Window int
	// FastIngest creates the scenarios' streams with allow_batched, so
	// that the relays publish in fast-ingest batches.
	FastIngest bool
	// LatencyFile, when set, receives every latency run's events as CSV.
	LatencyFile string
	// HTMLReport, when set, receives the run's charts as an HTML page:
	// drain curves, throughput against the limits, latency histograms.
	HTMLReport string
	// JSONReport, when set, receives the run's figures as JSON (Record),
	// with the commit, machine, load, versions and command.
	JSONReport string

	// Self is the outbox-relay executable: the relay runs and the
	// nats-server process are started from it.
	Self string
	// Out receives the report's tables.
	Out io.Writer
	// Progress receives a line per step as it happens.
	Progress io.Writer
}

// bench holds what the measurements share.
type bench struct {
	cfg      Options
	rates    []float64 // parsed Rates
	pool     *pgxpool.Pool
	repl     *pgconn.Config
	pgURL    string
	pgBinDir string
	natsURL  string
	nats     *natsproc.Process
	nc       *nats.Conn
	js       jetstream.JetStream
	dir      string
	checked  int
	// coldChecked is how many events the cold-start drains' checks
	// covered (apart from checked).
	coldChecked int
	report      *report
	record      *recorder // nil without JSONReport
}

// Run runs every measurement and prints the report.
func Run(ctx context.Context, opts Options) error {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	rates, err := parseRates(opts.Rates, opts.Duration)
	if err != nil {
		return err
	}
	b := &bench{cfg: opts, rates: rates, report: &report{progress: opts.Progress}}
	if opts.JSONReport != "" {
		b.record = startRecorder(ctx)
	}
	if opts.LatencyFile != "" {
		// The file holds this run only; runs append to it as they finish.
		if err := os.WriteFile(opts.LatencyFile, nil, 0o644); err != nil {
			return fmt.Errorf("--latency-file: %w", err)
		}
	}
	cleanup, err := b.setup(ctx)
	defer cleanup()
	if err != nil {
		if b.record != nil {
			b.record.stop()
		}
		return err
	}
	b.noteVersions(ctx)
	steps, err := b.steps()
	if err != nil {
		return err
	}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			if ferr := b.finish(err); ferr != nil {
				b.progress("%v", ferr)
			}
			return err
		}
	}
	return b.finish(nil)
}

// steps returns the measurements to run, in order: every one, or those
// Options.Only names.
func (b *bench) steps() ([]func(context.Context) error, error) {
	all := []struct {
		name string
		run  func(context.Context) error
	}{{"limits", b.limitsAndDrains}, {"cold", b.coldStarts}, {"latency", b.latencies}, {"resources", b.resources}, {"baseline", b.baseline}, {"tables", b.tables}, {"split", b.split}}
	chosen := map[string]bool{}
	for _, name := range strings.Split(b.cfg.Only, ",") {
		if name = strings.TrimSpace(name); name != "" {
			chosen[name] = true
		}
	}
	var steps []func(context.Context) error
	unknown := maps.Clone(chosen)
	for _, s := range all {
		// Tested against chosen, not unknown: once every name is found,
		// unknown is empty, which must not select the steps after it.
		if len(chosen) == 0 || chosen[s.name] {
			steps = append(steps, s.run)
			delete(unknown, s.name)
		}
	}
	for name := range unknown {
		return nil, fmt.Errorf("--only: no measurement %q (limits, cold, latency, resources, baseline, tables, split)", name)
	}
	return steps, nil
}

// finish prints the report of what was measured, and writes its JSON
// record and its charts when asked; failed is the error that ended the
// run early, or nil.
func (b *bench) finish(failed error) error {
	var tables strings.Builder
	b.report.print(&tables, b.checked, b.coldChecked)
	if _, err := io.WriteString(b.cfg.Out, tables.String()); err != nil {
		return err
	}
	if b.record != nil {
		rec := b.record.finish(b.report.figures(b.checked, b.coldChecked), tables.String(), failed)
		if err := writeRecord(b.cfg.JSONReport, rec); err != nil {
			return err
		}
		b.progress("wrote the figures to %s (load average %.1f–%.1f during the run)", b.cfg.JSONReport, rec.Load.Min, rec.Load.Max)
	}
	if b.cfg.HTMLReport == "" {
		return nil
	}
	f, err := os.Create(b.cfg.HTMLReport)
	if err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	if err := b.report.writeHTML(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	b.progress("wrote the charts to %s", b.cfg.HTMLReport)
	return nil
}

// parseRates parses the comma-separated rates, refusing rates that would
// measure nothing in runs of duration d.
func parseRates(list string, d time.Duration) ([]float64, error) {
	var rates []float64
	for _, r := range strings.Split(list, ",") {
		if strings.TrimSpace(r) == "" {
			continue
		}
		rate, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
		if err != nil || rate <= 0 {
			return nil, fmt.Errorf("--rates: %q is not a rate", r)
		}
		if int(rate*d.Seconds())/writersFor(rate) < 1 {
			return nil, fmt.Errorf("--rates %s with --duration %s writes no events: raise one of them", r, d)
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
	if b.dir, err = os.MkdirTemp("", "outbox-relay-bench-"); err != nil {
		return cleanup, err
	}
	closers = append(closers, func() { os.RemoveAll(b.dir) })
	b.pgURL = b.cfg.PGURL
	if b.pgURL == "" {
		b.progress("starting a throwaway Postgres cluster (wal_level=logical, fsync on)")
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
		b.progress("starting nats-server (JetStream, file storage) in a process of its own")
		stop, err := b.startNATS(ctx)
		if err != nil {
			return cleanup, err
		}
		closers = append(closers, stop)
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
	if b.cfg.PGURL != "" {
		// A slot left behind would keep the server's WAL forever.
		closers = append(closers, func() { b.dropSlots(context.WithoutCancel(ctx)) })
	}
	if b.nc, err = nats.Connect(b.natsURL); err != nil {
		return cleanup, err
	}
	closers = append(closers, b.nc.Close)
	b.js, err = jetstream.New(b.nc)
	return cleanup, err
}

// startNATS runs nats-server in a process of its own, its output in the
// benchmark's directory, and returns what stops it.
func (b *bench) startNATS(ctx context.Context) (func(), error) {
	out, err := os.Create(filepath.Join(b.dir, "nats.log"))
	if err != nil {
		return nil, err
	}
	b.nats, err = natsproc.Start(ctx, natsproc.Options{Exe: b.cfg.Self, Output: out,
		Server: devenv.NATSOptions{StoreDir: filepath.Join(b.dir, "jetstream")}})
	if err != nil {
		out.Close()
		return nil, err
	}
	b.natsURL = b.nats.URL()
	return func() {
		_ = b.nats.Stop()
		out.Close()
	}, nil
}

// noteVersions records the servers' versions for the JSON report.
func (b *bench) noteVersions(ctx context.Context) {
	if b.record == nil {
		return
	}
	var pg string
	if err := b.pool.QueryRow(ctx, `SELECT version()`).Scan(&pg); err != nil {
		pg = "unknown: " + err.Error()
	}
	b.record.mu.Lock()
	defer b.record.mu.Unlock()
	b.record.rec.Versions.Postgres = pg
	b.record.rec.Versions.NATSServer = b.nc.ConnectedServerVersion()
}

func (b *bench) natsStat() (procStat, bool) {
	if b.nats == nil {
		return procStat{}, false
	}
	return readProc(b.nats.PID())
}

// progress writes a timestamped progress line.
func (b *bench) progress(format string, args ...any) {
	writeProgress(b.cfg.Progress, format, args...)
}

func writeProgress(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// dropSlots drops the slots the runs' relays left in a database the
// benchmark did not create (those named bench_*, of this database).
func (b *bench) dropSlots(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rows, err := b.pool.Query(ctx, `SELECT slot_name FROM pg_replication_slots
		WHERE database = current_database() AND slot_name LIKE 'bench\_%' AND NOT active`)
	if err != nil {
		b.progress("could not list the benchmark's slots to drop them: %v", err)
		return
	}
	slots, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		b.progress("could not list the benchmark's slots to drop them: %v", err)
		return
	}
	for _, slot := range slots {
		if err := replication.DropSlot(ctx, b.pool, slot); err != nil {
			b.progress("%v: drop it by hand, it keeps WAL", err)
		}
	}
}
