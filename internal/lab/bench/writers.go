package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/replication"
)

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
	lags := sampleLag(ctx, b.pool, sc.slot, d)
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
