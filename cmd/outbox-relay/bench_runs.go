package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/verify"
)

// drainResult is one backlog drain by the relay.
type drainResult struct {
	events      int
	took        time.Duration
	relayCPU    time.Duration
	relayRSS    int64
	natsCPU     time.Duration
	natsKnown   bool
	walsndCPU   time.Duration
	walsndKnown bool
}

// drain starts the relay on a backlog of n events ending at end, waits
// until every event is stored and the slot is confirmed past end, and
// measures the relay, the NATS server and the walsender meanwhile.
func (b *bench) drain(ctx context.Context, sc scenario, n int, end pglogrepl.LSN) (drainResult, error) {
	stream, err := b.js.Stream(ctx, sc.names.stream)
	if err != nil {
		return drainResult{}, err
	}
	count := func() uint64 {
		info, err := stream.Info(ctx)
		if err != nil {
			return 0
		}
		return info.State.Msgs
	}
	before := count()
	natsBefore, natsKnown := b.natsStat()
	relay, err := startChild(b.self, sc.relayArgs(b.pgURL, b.natsURL, b.cfg.Window), filepath.Join(b.dir, "relay-"+sc.name+".log"))
	if err != nil {
		return drainResult{}, err
	}
	started := time.Now()
	dctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	walsnd := 0
	err = waitDrained(dctx, b.pool, sc.names.slot, end, func() uint64 {
		if walsnd == 0 {
			walsnd = slotPID(ctx, b.pool, sc.names.slot)
		}
		return count() - before
	}, n)
	took := time.Since(started)
	r := drainResult{events: n, took: took}
	if st, ok := readProc(relay.pid()); ok {
		r.relayCPU, r.relayRSS = st.cpu, st.peakRSS
	}
	if natsAfter, ok := b.natsStat(); ok && natsKnown {
		r.natsCPU, r.natsKnown = natsAfter.cpu-natsBefore.cpu, true
	}
	if st, ok := readPostgresProc(walsnd); ok {
		r.walsndCPU, r.walsndKnown = st.cpu, true
	}
	if serr := relay.stop(); err == nil && serr != nil {
		err = fmt.Errorf("relay exit: %w", serr)
	}
	if err != nil {
		return r, err
	}
	return r, b.check(ctx, sc, stream)
}

// check ends every run: the table against the stream.
func (b *bench) check(ctx context.Context, sc scenario, stream jetstream.Stream) error {
	rep, err := verify.Run(ctx, b.pool, stream, verify.Options{Table: sc.names.table, Subjects: []string{sc.names.subject.Filter(), sc.names.deadLetter}})
	if err != nil {
		return err
	}
	if !rep.OK() {
		return fmt.Errorf("%s: table vs stream: %d missing, %d extra, %d duplicated, %d out of order", sc.name,
			len(rep.Missing), len(rep.Extra), len(rep.Duplicates), len(rep.OrderViolations))
	}
	b.checked += rep.Rows
	return nil
}

// latencyResult is one fixed-rate run.
type latencyResult struct {
	rate, achieved float64
	writers        int
	events         int
	p50, p99, max  time.Duration // from COMMIT returning
	p99WithCommit  time.Duration // from just before COMMIT: includes its WAL flush
	cpu            cpuShare      // where the machine's time went meanwhile
	behind         time.Duration // from the last commit until everything was stored
	lagGrew        bool
}

// latency commits one-row transactions at rate for d while the relay runs,
// and measures, per event, the time from its commit to its storage in the
// stream, both on this machine's clock.
func (b *bench) latency(ctx context.Context, sc scenario, rate float64, d time.Duration) (latencyResult, error) {
	relay, err := startChild(b.self, sc.relayArgs(b.pgURL, b.natsURL, b.cfg.Window), filepath.Join(b.dir, "relay-"+sc.name+".log"))
	if err != nil {
		return latencyResult{}, err
	}
	defer relay.stop()
	// Streaming, not only the slot being active: on a first start the
	// slot's creator holds it for a moment, and the walsender measured must
	// be the streaming one. The stream exists before streaming starts.
	if err := waitLogLine(ctx, filepath.Join(b.dir, "relay-"+sc.name+".log"), "streaming from the slot"); err != nil {
		return latencyResult{}, err
	}
	stream, err := b.js.Stream(ctx, sc.names.stream)
	if err != nil {
		return latencyResult{}, err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return latencyResult{}, err
	}
	meter := b.startMeter(ctx, sc, relay.pid())
	started := time.Now()
	committed, writersCPU, lagGrew, err := b.writeAtRate(ctx, sc, rate, d)
	if err != nil {
		return latencyResult{}, err
	}
	took := time.Since(started)
	cpu := meter.stop()
	cpu.writers, cpu.writersKnown = writersCPU, writersCPU > 0
	// Each message's stored time is in its metadata and its commit time in
	// its payload: read them after the run, so no consumer competes with
	// the relay while it is measured.
	samples, err := commitToStored(ctx, b.pool, stream, sc, info.State.LastSeq, committed)
	if err != nil {
		return latencyResult{}, err
	}
	if err := b.writeLatencies(rate, samples); err != nil {
		return latencyResult{}, err
	}
	r := summarize(samples)
	r.rate, r.achieved, r.writers, r.lagGrew, r.cpu = rate, float64(r.events)/took.Seconds(), writersFor(rate), lagGrew, cpu
	return r, b.check(ctx, sc, stream)
}

// latencySample is one event of a latency run, all times on this
// machine's clock.
type latencySample struct {
	seq          uint64
	beforeCommit time.Time // just before COMMIT, inside the transaction
	committed    time.Time // when COMMIT returned: durable and visible
	stored       time.Time // stored in the stream
}

// latency is the time from commit to stream. Postgres may send the WAL
// before COMMIT returns to the writer, so it can be 0.
func (s latencySample) latency() time.Duration { return max(s.stored.Sub(s.committed), 0) }

// withCommit adds the commit's own wait (WAL flush) to the latency.
func (s latencySample) withCommit() time.Duration { return max(s.stored.Sub(s.beforeCommit), 0) }

// summarize computes a run's percentiles and how long after the last
// commit the last event was stored.
func summarize(samples []latencySample) latencyResult {
	lats := make([]time.Duration, len(samples))
	withCommit := make([]time.Duration, len(samples))
	var lastCommit, lastStored time.Time
	for i, s := range samples {
		lats[i], withCommit[i] = s.latency(), s.withCommit()
		lastCommit, lastStored = maxTime(lastCommit, s.committed), maxTime(lastStored, s.stored)
	}
	sortDurations(lats)
	sortDurations(withCommit)
	n := len(lats)
	return latencyResult{events: n, p50: lats[n/2], p99: lats[n*99/100], max: lats[n-1],
		p99WithCommit: withCommit[n*99/100], behind: max(lastStored.Sub(lastCommit), 0)}
}

func sortDurations(d []time.Duration) { sort.Slice(d, func(i, j int) bool { return d[i] < d[j] }) }

// writeLatencies appends a run's samples to --latency-file, if given.
func (b *bench) writeLatencies(rate float64, samples []latencySample) error {
	if b.cfg.LatencyFile == "" {
		return nil
	}
	f, err := os.OpenFile(b.cfg.LatencyFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("--latency-file: %w", err)
	}
	w := bufio.NewWriter(f)
	if st, err := f.Stat(); err == nil && st.Size() == 0 {
		fmt.Fprintln(w, "rate,stream_seq,before_commit_unix_us,committed_unix_us,stored_unix_us,latency_us")
	}
	for _, s := range samples {
		fmt.Fprintf(w, "%g,%d,%d,%d,%d,%d\n", rate, s.seq, s.beforeCommit.UnixMicro(), s.committed.UnixMicro(), s.stored.UnixMicro(), s.latency().Microseconds())
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("--latency-file: %w", err)
	}
	return f.Close()
}

// writersFor is how many paced writers a rate needs: one plpgsql loop
// keeps up with about 2,000 commits a second here.
func writersFor(rate float64) int { return int(rate/2000) + 1 }

// writeAtRate commits one-row transactions at rate for d, from paced
// procedures inside Postgres (writersFor(rate) of them). It returns when
// each event's COMMIT returned, by order_id, the CPU time of the writers'
// backends (0 when Postgres runs elsewhere), and whether the slot's lag
// kept growing.
func (b *bench) writeAtRate(ctx context.Context, sc scenario, rate float64, d time.Duration) (map[int]time.Time, time.Duration, bool, error) {
	workers := writersFor(rate)
	var wg sync.WaitGroup
	var mu sync.Mutex
	committed := map[int]time.Time{}
	var cpu time.Duration
	errc := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			times, used, err := b.pacedWriter(ctx, sc, rate, d, w, workers)
			if err != nil {
				errc <- err
				return
			}
			mu.Lock()
			defer mu.Unlock()
			cpu += used
			for i, t := range times {
				committed[i*workers+w] = t
			}
		}(w)
	}
	lags := sampleLag(ctx, b.pool, sc.names.slot, d)
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return nil, 0, false, err
	}
	return committed, cpu, growing(<-lags), nil
}

// pacedWriter runs one paced procedure and returns when each of its
// COMMITs returned and the CPU time its backend used.
func (b *bench) pacedWriter(ctx context.Context, sc scenario, rate float64, d time.Duration, w, workers int) ([]time.Time, time.Duration, error) {
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer conn.Release()
	pid := int(conn.Conn().PgConn().PID())
	before, known := readPostgresProc(pid)
	call := fmt.Sprintf("CALL %s(%g, %g, %d, %d, NULL)", sc.pacedName(), rate, d.Seconds(), w, workers)
	results, err := conn.Conn().PgConn().Exec(ctx, call).ReadAll()
	if err != nil {
		return nil, 0, fmt.Errorf("paced writer: %w", err)
	}
	var used time.Duration
	if after, ok := readPostgresProc(pid); ok && known {
		used = after.cpu - before.cpu
	}
	if len(results) != 1 || len(results[0].Rows) != 1 || len(results[0].Rows[0]) != 1 {
		return nil, 0, errors.New("paced writer: the procedure returned no commit times")
	}
	times, err := parseMicros(string(results[0].Rows[0][0]))
	return times, used, err
}

// parseMicros parses a bigint[] of Unix microseconds in Postgres's text form.
func parseMicros(text string) ([]time.Time, error) {
	var times []time.Time
	for _, f := range strings.Split(strings.Trim(text, "{}"), ",") {
		if f == "" {
			continue
		}
		us, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("paced writer: commit time %q: %w", f, err)
		}
		times = append(times, time.UnixMicro(us))
	}
	return times, nil
}

// commitToStored waits until the stream holds every row written after its
// sequence skip, and returns each event's times, in stream order.
func commitToStored(ctx context.Context, pool *pgxpool.Pool, stream jetstream.Stream, sc scenario, skip uint64, committed map[int]time.Time) ([]latencySample, error) {
	want := len(committed)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var samples []latencySample
		err := sink.ForEach(ctx, stream, []string{sc.names.subject.Filter()}, sink.Read{From: skip + 1}, func(m *jetstream.RawStreamMsg) bool {
			var p struct {
				OrderID   int       `json:"order_id"`
				WrittenAt time.Time `json:"written_at"`
			}
			if json.Unmarshal(m.Data, &p) != nil || p.WrittenAt.IsZero() {
				return true
			}
			if at, ok := committed[p.OrderID]; ok {
				samples = append(samples, latencySample{seq: m.Sequence, beforeCommit: p.WrittenAt, committed: at, stored: m.Time})
			}
			return true
		})
		if err != nil {
			return nil, err
		}
		if want > 0 && len(samples) >= want {
			return samples, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("only %d of %d events stored", len(samples), want)
		}
	}
}

// sampleLag samples the slot's lag every 500ms for d.
func sampleLag(ctx context.Context, pool *pgxpool.Pool, slot string, d time.Duration) <-chan []int64 {
	out := make(chan []int64, 1)
	go func() {
		var lags []int64
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
			info, _ := replication.LookupSlot(ctx, pool, slot)
			lags = append(lags, info.LagBytes)
		}
		out <- lags
	}()
	return out
}

// growing reports whether the lag in the second half stays well above the
// first half's: the relay does not keep up.
func growing(lags []int64) bool {
	if len(lags) < 4 {
		return false
	}
	avg := func(s []int64) float64 {
		var t int64
		for _, v := range s {
			t += v
		}
		return float64(t) / float64(len(s))
	}
	first, second := avg(lags[:len(lags)/2]), avg(lags[len(lags)/2:])
	return second > 2*first && second > 4<<20
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// waitLogLine waits until the relay's log file contains line.
func waitLogLine(ctx context.Context, file, line string) error {
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(file); err == nil && strings.Contains(string(b), line) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			b, _ := os.ReadFile(file)
			return fmt.Errorf("the relay did not log %q:\n%s", line, b)
		}
	}
}
