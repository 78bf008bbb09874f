package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
)

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
	latencies      []time.Duration // every event's, for the HTML report's histogram
}

// latency commits one-row transactions at rate for d while the relay runs,
// and measures, per event, the time from its commit to its storage in the
// stream, both on this machine's clock.
func (b *bench) latency(ctx context.Context, sc scenario, rate float64, d time.Duration) (latencyResult, error) {
	relay, err := startChild(b.cfg.Self, b.relayArgs(sc), filepath.Join(b.dir, "relay-"+sc.name+".log"))
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
	stream, err := b.js.Stream(ctx, sc.stream)
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
	r.latencies = make([]time.Duration, len(samples))
	for i, s := range samples {
		r.latencies[i] = s.latency()
	}
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

// commitToStored waits until the stream holds every row written after its
// sequence skip, and returns each event's times, in stream order.
func commitToStored(ctx context.Context, pool *pgxpool.Pool, stream jetstream.Stream, sc scenario, skip uint64, committed map[int]time.Time) ([]latencySample, error) {
	want := len(committed)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var samples []latencySample
		err := jssink.ForEach(ctx, stream, []string{sc.subject.Filter()}, jssink.Read{From: skip + 1}, func(m *jetstream.RawStreamMsg) bool {
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

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
