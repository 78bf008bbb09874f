package relaytest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
	"github.com/outbox-relay/outbox-relay/internal/lab/natsproc"
)

// NemesisConfig is what a nemesis run needs.
type NemesisConfig struct {
	// Env is the test's world; the nemesis puts proxies between the relay
	// and both servers and points Env at a nats-server process of its own.
	Env *Env
	// Cluster is Env's Postgres, private to the test: it is stopped and
	// started.
	Cluster *devenv.Postgres
	// Relay is the relay binary.
	Relay Binary
	// NATS serves nats-server in a child process: the test binary, whose
	// TestMain calls ServeNATSIfAsked (Suite.NATS).
	NATS Binary
	// RelayFlags are added to `run` and Env's flags.
	RelayFlags []string
	Schedule   Schedule
	// Workload is the load during the faults (a default when nil).
	Workload *Workload
	// RecoveryTimeout bounds each wait for recovery (default 2m).
	RecoveryTimeout time.Duration
	// Replay is the command that replays this run, printed on failure.
	Replay string
}

// Nemesis runs a Schedule against relays under load and checks the result.
// Every step injects its fault, heals it after the step's hold time and
// waits for recovery: the slot confirms past the WAL written before the
// heal, and the stream grows again.
type Nemesis struct {
	t    testing.TB
	cfg  NemesisConfig
	env  *Env
	args []string

	nats      *natsproc.Process
	pgProxy   *Proxy
	natsProxy *Proxy
	relays    []*nemesisRelay // running, oldest first
	all       []*nemesisRelay

	counts   map[Fault]int
	recovery map[Fault]time.Duration // longest recovery per kind
	findings []string
	step     *Step
	dupAcks  float64
}

type nemesisRelay struct {
	n    int
	r    *Relay
	step int // the step that started it (0: the first relay)
}

// NemesisResult is what a run did.
type NemesisResult struct {
	Seed            uint64
	Steps           int
	Counts          map[Fault]int
	Recovery        map[Fault]time.Duration
	Relays          int     // relay processes started
	DuplicateAcks   float64 // publishes JetStream dropped as duplicates, summed over the relays
	Unknown         int     // workload events whose commit failed (the table knows)
	Check           Result
	Faulting, Total time.Duration
}

// quietTB keeps StartRelay from printing each relay's log tail when the
// test fails: the nemesis starts many and writes their logs to files.
type quietTB struct{ testing.TB }

func (quietTB) Failed() bool { return false }

// NewNemesis starts a nats-server process with a store, a proxy in front
// of it and one in front of Postgres, and points env at them.
func NewNemesis(t testing.TB, cfg NemesisConfig) *Nemesis {
	t.Helper()
	if cfg.RecoveryTimeout == 0 {
		cfg.RecoveryTimeout = 2 * time.Minute
	}
	if cfg.Workload == nil {
		cfg.Workload = &Workload{Writers: 3, MaxTxRows: 10, Aggregates: 30, RollbackEvery: 7, Pace: 40 * time.Millisecond}
	}
	n := &Nemesis{t: t, cfg: cfg, env: cfg.Env, counts: map[Fault]int{}, recovery: map[Fault]time.Duration{}}
	t.Cleanup(n.dumpOnFailure)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	n.nats, err = natsproc.Start(ctx, natsproc.Options{
		Exe: cfg.NATS.Path, Args: []string{"-test.run=^$"}, Output: os.Stderr,
		Server: devenv.NATSOptions{StoreDir: t.TempDir(), SyncAlways: true},
	})
	if err != nil {
		n.fatalf("start nats-server: %v", err)
	}
	t.Cleanup(n.nats.Kill)
	n.env.UseNATS(n.nats.URL())
	n.natsProxy = StartProxy(t, strings.TrimPrefix(n.nats.URL(), "nats://"))
	n.pgProxy = StartProxy(t, n.env.PGAddr())
	n.env.RelayNATS = "nats://" + n.natsProxy.Addr()
	n.env.RelayPG = n.env.PGURLVia(n.pgProxy.Addr())
	n.args = append(append([]string{"run"}, n.env.RelayArgs()...), cfg.RelayFlags...)
	return n
}

// Run starts a relay and the load, runs the schedule, stops the load,
// waits until the slot confirms all that was written, stops the relay
// with SIGTERM (it must exit 0) and checks the stream against the table.
func (n *Nemesis) Run() NemesisResult {
	n.t.Helper()
	start := time.Now()
	first := n.startRelay(0)
	first.r.WaitLog("streaming from the slot", time.Minute)
	if _, err := n.env.Pool.Exec(context.Background(), `CREATE TABLE IF NOT EXISTS nemesis_bulk (n BIGINT, pad TEXT)`); err != nil {
		n.fatalf("create the bulk table: %v", err)
	}

	w := n.cfg.Workload
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loadDone := make(chan error, 1)
	go func() { loadDone <- w.Run(ctx, n.env, 0) }()
	if _, err := n.waitRecovered(); err != nil { // the load reaches the stream
		n.fatalf("before the first fault: %v", err)
	}

	faultStart := time.Now()
	for i := range n.cfg.Schedule.Steps {
		st := n.cfg.Schedule.Steps[i]
		n.step = &st
		time.Sleep(st.Gap)
		n.logf("step %s", st)
		n.inject(st)
		n.counts[st.Fault]++
		took, err := n.waitRecovered()
		if err != nil {
			n.fatalf("no recovery: %v", err)
		}
		n.recovery[st.Fault] = max(n.recovery[st.Fault], took)
		n.logf("step #%d recovered %s after the heal", st.N, took.Round(time.Millisecond))
	}
	faulting := time.Since(faultStart)
	n.step = nil

	cancel()
	if err := <-loadDone; err != nil {
		n.fatalf("workload: %v", err)
	}
	n.catchUp()
	for len(n.relays) > 0 {
		n.stopRelay(n.relays[0], false)
	}
	res := NemesisResult{
		Seed: n.cfg.Schedule.Seed, Steps: len(n.cfg.Schedule.Steps), Counts: n.counts, Recovery: n.recovery,
		Relays: len(n.all), DuplicateAcks: n.dupAcks, Unknown: w.nemesisUnknown(), Faulting: faulting,
	}
	// Both ways: table against stream (nothing missing, extra, duplicated,
	// out of commit order), and the workload's own record (every event it
	// committed stored, none it rolled back).
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if msgs, err := n.stored(ctx); err == nil {
		n.logf("checking %d stream messages against the table and the workload", msgs)
	}
	checkStart := time.Now()
	res.Check = n.env.CheckWith(Expect{Workload: w, MinTx: 100})
	n.logf("checked in %s", time.Since(checkStart).Round(time.Millisecond))
	res.Total = time.Since(start)
	for _, f := range n.findings {
		n.t.Errorf("nemesis seed %d: %s", n.cfg.Schedule.Seed, f)
	}
	return res
}

func (w *Workload) nemesisUnknown() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.unknown)
}

// catchUp waits, with the load stopped, until the slot has confirmed all
// WAL written so far.
func (n *Nemesis) catchUp() {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	target, err := n.walLSN(ctx)
	if err != nil {
		n.fatalf("after the load: %v", err)
	}
	for {
		confirmed, err := n.confirmedLSN(ctx)
		if err == nil && confirmed >= target {
			n.logf("caught up: the slot confirmed %s (WAL after the last write: %s)", confirmed, target)
			return
		}
		if ctx.Err() != nil {
			n.fatalf("the slot did not catch up within 5m: confirmed %s, WAL after the last write %s (%v)", confirmed, target, err)
		}
		n.checkAlive()
		time.Sleep(100 * time.Millisecond)
	}
}

// waitRecovered waits until the slot has confirmed the WAL written up to
// now and the stream holds more messages than now, and returns how long
// that took. Relays must not exit on their own meanwhile.
func (n *Nemesis) waitRecovered() (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.RecoveryTimeout)
	defer cancel()
	target, err := n.walLSN(ctx)
	if err != nil {
		return 0, err
	}
	before, err := n.stored(ctx)
	if err != nil {
		return 0, err
	}
	var confirmed pglogrepl.LSN
	var now uint64
	for {
		n.checkAlive()
		c, cerr := n.confirmedLSN(ctx)
		if cerr == nil {
			confirmed = c
		}
		s, serr := n.stored(ctx)
		if serr == nil {
			now = s
		}
		if confirmed >= target && now > before {
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("after %s the slot confirmed %s of WAL %s, the stream went from %d to %d messages (last errors: %v, %v)",
				n.cfg.RecoveryTimeout, confirmed, target, before, now, cerr, serr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// walLSN reads pg_current_wal_lsn(), retrying while Postgres starts.
func (n *Nemesis) walLSN(ctx context.Context) (pglogrepl.LSN, error) {
	for {
		var s string
		err := n.env.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s)
		if err == nil {
			return pglogrepl.ParseLSN(s)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("read pg_current_wal_lsn: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (n *Nemesis) confirmedLSN(ctx context.Context) (pglogrepl.LSN, error) {
	var s *string
	err := n.env.Pool.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, n.env.Slot).Scan(&s)
	if err != nil {
		return 0, fmt.Errorf("read the slot: %w", err)
	}
	if s == nil {
		return 0, errors.New("the slot has no confirmed_flush_lsn")
	}
	return pglogrepl.ParseLSN(*s)
}

// stored is the number of messages in the relay's stream.
func (n *Nemesis) stored(ctx context.Context) (uint64, error) {
	for {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := n.env.JS.Stream(c, n.env.Stream)
		if err == nil {
			i, ierr := s.Info(c)
			if ierr == nil {
				cancel()
				return i.State.Msgs, nil
			}
			err = ierr
		}
		cancel()
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("read the stream: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkAlive fails the test when a relay the nemesis did not stop exited.
func (n *Nemesis) checkAlive() {
	n.t.Helper()
	for _, r := range n.relays {
		if r.r.Exited() {
			n.fatalf("relay %d (pid %d) exited on its own (code %d); log tail:\n%s", r.n, r.r.Pid(), r.r.Wait(5*time.Second), tail(r.r.Logs(), 40))
		}
	}
}

func (n *Nemesis) startRelay(step int) *nemesisRelay {
	n.t.Helper()
	r := &nemesisRelay{n: len(n.all) + 1, r: StartRelay(quietTB{n.t}, n.cfg.Relay, n.args...), step: step}
	n.relays = append(n.relays, r)
	n.all = append(n.all, r)
	n.logf("relay %d started (pid %d)", r.n, r.r.Pid())
	return r
}

// stopRelay ends r with SIGKILL, or with SIGTERM after which it must exit
// 0 within a minute (a finding, not the end of the run, when it does not).
func (n *Nemesis) stopRelay(r *nemesisRelay, kill bool) {
	n.t.Helper()
	for i, x := range n.relays {
		if x == r {
			n.relays = append(n.relays[:i:i], n.relays[i+1:]...)
			break
		}
	}
	if v, err := r.r.Metric(DuplicateAcksMetric); err == nil {
		n.dupAcks += v // what it counted until now; a SIGTERM drain adds little
	} else {
		n.logf("relay %d: cannot read %s: %v", r.n, DuplicateAcksMetric, err)
	}
	if kill {
		r.r.Kill()
		n.logf("relay %d killed", r.n)
		return
	}
	r.r.Term()
	deadline := time.Now().Add(time.Minute)
	for !r.r.Exited() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !r.r.Exited() {
		n.finding("relay %d did not exit within 1m of SIGTERM; killed it", r.n)
		r.r.Kill()
		return
	}
	if code := r.r.Wait(5 * time.Second); code != 0 {
		n.finding("relay %d exited %d after SIGTERM; log tail:\n%s", r.n, code, tail(r.r.Logs(), 20))
		return
	}
	n.logf("relay %d stopped (SIGTERM, exit 0)", r.n)
}

// finding records a failure that does not stop the run.
func (n *Nemesis) finding(format string, args ...any) {
	n.t.Helper()
	msg := fmt.Sprintf(format, args...)
	if n.step != nil {
		msg = fmt.Sprintf("step %s: %s", n.step, msg)
	}
	n.logf("FINDING: %s", msg)
	n.findings = append(n.findings, msg)
}

func (n *Nemesis) logf(format string, args ...any) {
	n.t.Helper()
	n.t.Logf("%s "+format, append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

func (n *Nemesis) fatalf(format string, args ...any) {
	n.t.Helper()
	msg := fmt.Sprintf(format, args...)
	if n.step != nil {
		msg = fmt.Sprintf("step %s: %s", n.step, msg)
	}
	n.t.Fatalf("nemesis seed %d: %s", n.cfg.Schedule.Seed, msg)
}
