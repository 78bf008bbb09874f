package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

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
	if st, ok := readProc(walsnd); ok && walsnd != 0 {
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
	events         int
	p50, p99, max  time.Duration
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
	stream, err := waitStream(ctx, b.js, sc.names.stream)
	if err != nil {
		return latencyResult{}, err
	}
	if err := waitSlotActive(ctx, b.pool, sc.names.slot); err != nil {
		return latencyResult{}, err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return latencyResult{}, err
	}
	started := time.Now()
	lagGrew, err := b.writeAtRate(ctx, sc, rate, d)
	if err != nil {
		return latencyResult{}, err
	}
	took := time.Since(started)
	// Each message's stored time is in its metadata and its commit time in
	// its payload: read them after the run, so no consumer competes with
	// the relay while it is measured.
	lats, behind, n, err := commitToStored(ctx, b.pool, stream, sc, info.State.LastSeq)
	if err != nil {
		return latencyResult{}, err
	}
	r := latencyResult{rate: rate, achieved: float64(n) / took.Seconds(), events: n, lagGrew: lagGrew, behind: behind}
	r.p50, r.p99, r.max = lats[len(lats)/2], lats[len(lats)*99/100], lats[len(lats)-1]
	return r, b.check(ctx, sc, stream)
}

// writeAtRate commits one-row transactions at rate for d, from paced
// procedures inside Postgres (one per 2,000 events/s). It reports whether
// the slot's lag kept growing.
func (b *bench) writeAtRate(ctx context.Context, sc scenario, rate float64, d time.Duration) (bool, error) {
	workers := int(rate/2000) + 1
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			conn, err := b.pool.Acquire(ctx)
			if err != nil {
				errc <- err
				return
			}
			defer conn.Release()
			call := fmt.Sprintf("CALL outbox_bench_paced('%s', %g, %g, %d, %d)", sc.names.table.Quoted(), rate, d.Seconds(), w, workers)
			if _, err := conn.Conn().PgConn().Exec(ctx, call).ReadAll(); err != nil {
				errc <- fmt.Errorf("paced writer: %w", err)
			}
		}(w)
	}
	lags := sampleLag(ctx, b.pool, sc.names.slot, d)
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return false, err
	}
	return growing(<-lags), nil
}

// commitToStored waits until the stream holds every row written after its
// sequence skip, and returns the sorted latencies from commit (the
// payload's written_at) to storage, how long after the last commit the last
// event was stored, and how many events were measured.
func commitToStored(ctx context.Context, pool *pgxpool.Pool, stream jetstream.Stream, sc scenario, skip uint64) ([]time.Duration, time.Duration, int, error) {
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+sc.names.table.Quoted()).Scan(&rows); err != nil {
		return nil, 0, 0, err
	}
	want := rows - int(skip)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var lats []time.Duration
		var lastCommit, lastStored time.Time
		err := sink.ForEach(ctx, stream, []string{sc.names.subject.Filter()}, sink.Read{From: skip + 1}, func(m *jetstream.RawStreamMsg) bool {
			var p struct {
				WrittenAt time.Time `json:"written_at"`
			}
			if json.Unmarshal(m.Data, &p) == nil && !p.WrittenAt.IsZero() {
				lats = append(lats, max(m.Time.Sub(p.WrittenAt), 0))
				lastCommit, lastStored = maxTime(lastCommit, p.WrittenAt), maxTime(lastStored, m.Time)
			}
			return true
		})
		if err != nil {
			return nil, 0, 0, err
		}
		if want > 0 && len(lats) >= want {
			sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
			return lats, max(lastStored.Sub(lastCommit), 0), len(lats), nil
		}
		if time.Now().After(deadline) {
			return nil, 0, 0, fmt.Errorf("only %d of %d events stored", len(lats), want)
		}
	}
}

// sampleLag samples the slot's lag every 500ms for d.
func sampleLag(ctx context.Context, pool *pgxpool.Pool, slot string, d time.Duration) <-chan []int64 {
	out := make(chan []int64, 1)
	go func() {
		var lags []int64
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
			var lag int64
			_ = pool.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&lag)
			lags = append(lags, lag)
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

func waitStream(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, error) {
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		s, err := js.Stream(ctx, name)
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			return nil, err
		}
	}
}

func waitSlotActive(ctx context.Context, pool *pgxpool.Pool, slot string) error {
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if slotPID(ctx, pool, slot) != 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the relay did not start streaming from slot %s", slot)
		}
	}
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
