package relaytest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"
)

// NemesisConfig is what a nemesis run needs.
type NemesisConfig struct {
	// Env is the test's world; the nemesis points it at a NATS cluster of
	// its own and puts proxies between the relay and both servers.
	Env *Env
	// Cluster is Env's Postgres, private to the test: it is stopped and
	// started.
	Cluster *devenv.Postgres
	// Relay is the relay binary.
	Relay Binary
	// RelayFlags are added to `run` and Env's flags.
	RelayFlags []string
	Schedule   Schedule
	// Rate is what the default workload aims at, in committed events a
	// second (DefaultNemesisRate when 0). The run fails when the workload
	// reached less than MinRateShare of it.
	Rate float64
	// Workload is the load during the faults (a default when nil, paced
	// at Rate).
	Workload *Workload
	// RecoveryTimeout bounds each wait for recovery (default 2m).
	RecoveryTimeout time.Duration
	// Replay is the command that replays this run, printed on failure.
	Replay string
}

// DefaultNemesisRate is the workload's default target: 2,000 committed
// events a second, a busy pipeline on which faults meet publishes in
// flight.
const DefaultNemesisRate = 2000

// MinRateShare is the least share of the target rate the workload must
// reach. The target is what the run asks for, not what a loaded test
// machine can give: a machine shared with other test runs may fall short
// of it, and that is not a failure of the relay; a workload that reaches
// less than half of it is broken (its writers stall, or the machine cannot
// run the test as meant), and the run says so by failing.
const MinRateShare = 0.5

// Nemesis runs a Schedule against relays under load and checks the result.
// Every step waits for publishes in flight, injects its fault, heals it
// after the step's hold time and waits for recovery: the slot confirms
// past the WAL written before the heal, and the stream grows again. Then
// no relay may have had a publish acknowledged as a duplicate.
type Nemesis struct {
	t      testing.TB
	cfg    NemesisConfig
	env    *Env
	args   []string
	window int // the relay's --window

	nats        *NATSCluster
	natsProxies []*Proxy // one per node
	pgProxy     *Proxy
	relays      []*nemesisRelay // running, oldest first
	all         []*nemesisRelay

	counts        map[Fault]int
	recovery      map[Fault]time.Duration // longest recovery per kind
	findings      []string
	step          *Step
	hit           *faultHit // the current step's
	hits          []faultHit
	leaderChanges []LeaderChange
	dupAcks       float64
	unreadAcks    int // relays whose duplicate acks could not be read before they ended
}

type nemesisRelay struct {
	n       int
	r       *Relay
	step    int     // the step that started it (0: the first relay)
	dupSeen float64 // its duplicate acks at the last read
}

// NemesisResult is what a run did.
type NemesisResult struct {
	Seed     uint64
	Steps    int
	Counts   map[Fault]int
	Recovery map[Fault]time.Duration
	Relays   int // relay processes started
	// DuplicateAcks are publishes JetStream dropped as duplicates, summed
	// over the relays (each step fails on any).
	DuplicateAcks float64
	Unknown       int // workload events whose commit failed (the table knows)
	// Rate is the target, Achieved what the workload committed a second
	// over LoadTime.
	Rate, Achieved float64
	LoadTime       time.Duration
	// Hits are the faults' publishes in flight, step by step.
	Hits []faultHit
	// LeaderChanges are the stream leaders killed; LeaderElections the
	// elections of a stream leader the nats-server logs show.
	LeaderChanges   []LeaderChange
	LeaderElections int
	RelayRestarts   int // relay-kill and relay-term steps
	PastWindow      int // of them, held at least the duplicate window
	Check           Result
	Faulting, Total time.Duration
}

// quietTB keeps StartRelay from printing each relay's log tail when the
// test fails: the nemesis starts many and writes their logs to files.
type quietTB struct{ testing.TB }

func (quietTB) Failed() bool { return false }

// NewNemesis starts a NATS cluster (see startNATS), a proxy in front of
// Postgres, and points env at them.
func NewNemesis(t testing.TB, cfg NemesisConfig) *Nemesis {
	t.Helper()
	if cfg.RecoveryTimeout == 0 {
		cfg.RecoveryTimeout = 2 * time.Minute
	}
	if cfg.Rate == 0 {
		cfg.Rate = DefaultNemesisRate
	}
	if cfg.Workload == nil {
		cfg.Workload = &Workload{Writers: 8, MaxTxRows: 10, Aggregates: 200, RollbackEvery: 7, Rate: cfg.Rate}
	}
	n := &Nemesis{t: t, cfg: cfg, env: cfg.Env, counts: map[Fault]int{}, recovery: map[Fault]time.Duration{},
		window: relayWindow(cfg.RelayFlags)}
	t.Cleanup(n.dumpOnFailure)
	n.startNATS()
	n.pgProxy = StartProxy(t, n.env.PGAddr())
	n.env.RelayPG = n.env.PGURLVia(n.pgProxy.Addr())
	n.args = append(append([]string{"run"}, n.env.RelayArgs()...), cfg.RelayFlags...)
	return n
}

// relayWindow is the --window among flags, else the relay's default.
func relayWindow(flags []string) int {
	w := jssink.DefaultWindow
	for i, f := range flags {
		v, ok := strings.CutPrefix(f, "--window=")
		if f == "--window" && i+1 < len(flags) {
			v, ok = flags[i+1], true
		}
		if n, err := strconv.Atoi(v); ok && err == nil {
			w = n
		}
	}
	return w
}

// Run starts a relay and the load, runs the schedule, stops the load,
// waits until the slot confirms all that was written, stops the relay
// with SIGTERM (it must exit 0) and checks the stream against the table.
func (n *Nemesis) Run() NemesisResult {
	n.t.Helper()
	start := time.Now()
	first := n.startRelay(0)
	first.r.WaitLog("streaming from the slot", time.Minute)
	requireFastIngest(n.t, first.r) // with FastIngestEnv, the run tests batches
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
		n.runStep(n.cfg.Schedule.Steps[i])
	}
	faulting := time.Since(faultStart)
	n.step = nil

	cancel()
	if err := <-loadDone; err != nil {
		n.fatalf("workload: %v", err)
	}
	events, over, achieved := w.Achieved()
	n.logf("the workload committed %d events in %s: %.0f a second (target %.0f)", events, over.Round(time.Second), achieved, n.cfg.Rate)
	if w.Rate > 0 && achieved < MinRateShare*w.Rate {
		n.finding("the workload committed %.0f events a second, under %.0f%% of its target %.0f: the run did not load the relay as meant",
			achieved, 100*MinRateShare, w.Rate)
	}
	n.catchUp()
	for len(n.relays) > 0 {
		n.stopRelay(n.relays[0], false)
	}
	res := NemesisResult{
		Seed: n.cfg.Schedule.Seed, Steps: len(n.cfg.Schedule.Steps), Counts: n.counts, Recovery: n.recovery,
		Relays: len(n.all), DuplicateAcks: n.dupAcks, Unknown: w.nemesisUnknown(), Faulting: faulting,
		Rate: w.Rate, Achieved: achieved, LoadTime: over, Hits: n.hits, LeaderChanges: n.leaderChanges,
		LeaderElections: n.leaderElections(),
	}
	for _, st := range n.cfg.Schedule.Steps {
		if st.Fault == FaultRelayKill || st.Fault == FaultRelayTerm {
			res.RelayRestarts++
			if st.Hold >= DuplicateWindow {
				res.PastWindow++
			}
		}
	}
	// Both ways: table against stream (nothing missing, extra, duplicated,
	// out of commit order but where a stream leader was killed), and the
	// workload's own record (every event it committed stored, none it
	// rolled back).
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if msgs, err := n.stored(ctx); err == nil {
		n.logf("checking %d stream messages against the table and the workload", msgs)
	}
	checkStart := time.Now()
	res.Check = n.env.CheckWith(Expect{Workload: w, MinTx: 100, LeaderChanges: n.leaderChanges})
	n.logf("checked in %s", time.Since(checkStart).Round(time.Millisecond))
	for _, tol := range head(res.Check.Tolerated) {
		n.logf("tolerated at a stream leader change: %s", tol)
	}
	res.Total = time.Since(start)
	if n.unreadAcks > 0 {
		n.finding("%d relays ended before their duplicate PubAcks could be read", n.unreadAcks)
	}
	for _, f := range n.findings {
		n.t.Errorf("nemesis seed %d: %s", n.cfg.Schedule.Seed, f)
	}
	return res
}

// runStep runs one step: its gap under load, publishes in flight, the
// fault, its heal, the recovery, and the check of duplicate acks.
func (n *Nemesis) runStep(st Step) {
	n.t.Helper()
	n.step = &st
	time.Sleep(st.Gap)
	n.logf("step %s", st)
	before := n.marks()
	hit := n.awaitInFlight(n.relays)
	n.hit = &hit
	n.inject(st)
	n.counts[st.Fault]++
	took, err := n.waitRecovered()
	if err != nil {
		n.fatalf("no recovery: %v", err)
	}
	after := n.marks()
	n.hit.outages, n.hit.lostAcks, n.hit.skips = after.outages-before.outages, after.lostAcks-before.lostAcks, after.skips-before.skips
	n.hits = append(n.hits, *n.hit)
	n.hit = nil
	n.recovery[st.Fault] = max(n.recovery[st.Fault], took)
	if st.Fault == FaultLeaderKill || st.Fault == FaultNATSKill || st.Fault == FaultNATSStop {
		n.leaderRecovered()
	}
	n.checkDupAcks()
	n.logf("step #%d recovered %s after the heal", st.N, took.Round(time.Millisecond))
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
	info, err := n.streamInfo(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

// streamInfo reads the stream's state and cluster, retrying while the
// stream has no leader to answer.
func (n *Nemesis) streamInfo(ctx context.Context) (*jetstream.StreamInfo, error) {
	for {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := n.env.JS.Stream(c, n.env.Stream)
		if err == nil {
			i, ierr := s.Info(c)
			if ierr == nil {
				cancel()
				return i, nil
			}
			err = ierr
		}
		cancel()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("read the stream: %w", err)
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
	if err := n.readDupAcks(r); err != nil { // what it counted until now; a SIGTERM drain adds little
		n.unreadAcks++
		n.logf("relay %d: cannot read %s before it ends: %v", r.n, DuplicateAcksMetric, err)
	}
	if n.hit != nil && n.hit.lag < 0 {
		// r's end is the step's fault, and the read took a scrape's
		// time: look for r's publishes in flight again, so that the fault
		// follows the last look at once.
		hit := n.awaitInFlight([]*nemesisRelay{r})
		n.hit = &hit
	}
	if kill {
		n.fire()
		r.r.Kill()
		n.logf("relay %d killed", r.n)
		return
	}
	n.fire()
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
