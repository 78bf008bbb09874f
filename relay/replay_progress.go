package relay

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// progress logs how far a long run got: rows done of the total, the rate
// and the time left at that rate.
type progress struct {
	total int
	n     atomic.Int64
	began time.Time
	log   zerolog.Logger
}

func newProgress(total int, log zerolog.Logger) *progress {
	return &progress{total: max(total, 0), began: time.Now(), log: log}
}

// add counts one row done.
func (p *progress) add() { p.n.Add(1) }

// every logs a line each interval (defaultReplayProgress when zero) until
// the returned stop is called.
func (p *progress) every(ctx context.Context, interval time.Duration) (stop func()) {
	if interval <= 0 {
		interval = defaultReplayProgress
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				p.line(now)
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// line logs the progress as of now.
func (p *progress) line(now time.Time) {
	done := int(p.n.Load())
	rate, left := p.rate(done, now.Sub(p.began))
	p.log.Info().Int("done", done).Int("total", p.total).Float64("rows_per_second", rate).Dur("left", left).Msg("replaying")
}

// rate returns rows a second and the time left at that rate (0 while
// nothing is done).
func (p *progress) rate(done int, elapsed time.Duration) (float64, time.Duration) {
	if done == 0 || elapsed <= 0 {
		return 0, 0
	}
	rate := float64(done) / elapsed.Seconds()
	left := time.Duration(float64(max(p.total-done, 0)) / rate * float64(time.Second))
	return float64(int(rate*10)) / 10, left.Round(time.Second)
}
