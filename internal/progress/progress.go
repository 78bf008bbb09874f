// Package progress logs how far a long piece of work got: a line every
// interval with the count done, the total, the rate and the time left at
// that rate. A replay, a take-up publishing a backlog and verify over a
// big table use it.
package progress

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// DefaultEvery is how often a Meter logs when given no interval.
const DefaultEvery = 10 * time.Second

// Meter counts work done of a total and logs it.
type Meter struct {
	msg   string
	total int
	n     atomic.Int64
	began time.Time
	log   zerolog.Logger
}

// New returns a meter of total items (0: not known) whose lines say msg.
func New(msg string, total int, log zerolog.Logger) *Meter {
	return &Meter{msg: msg, total: max(total, 0), began: time.Now(), log: log}
}

// Add counts one item done.
func (m *Meter) Add() { m.n.Add(1) }

// Done is how many items are done.
func (m *Meter) Done() int { return int(m.n.Load()) }

// Every logs a line each interval (DefaultEvery when zero; none when
// negative) until the returned stop is called.
func (m *Meter) Every(ctx context.Context, interval time.Duration) (stop func()) {
	if interval < 0 {
		return func() {}
	}
	if interval == 0 {
		interval = DefaultEvery
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
				m.Line(now)
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// Line logs the progress as of now.
func (m *Meter) Line(now time.Time) {
	done := m.Done()
	rate, left := m.Rate(done, now.Sub(m.began))
	e := m.log.Info().Int("done", done)
	if m.total > 0 {
		e = e.Int("total", m.total)
	}
	e = e.Float64("rows_per_second", rate)
	if m.total > 0 {
		e = e.Dur("left", left)
	}
	e.Msg(m.msg)
}

// Rate returns items a second and the time left at that rate (0 while
// nothing is done or the total is not known).
func (m *Meter) Rate(done int, elapsed time.Duration) (float64, time.Duration) {
	if done == 0 || elapsed <= 0 {
		return 0, 0
	}
	rate := float64(done) / elapsed.Seconds()
	left := time.Duration(float64(max(m.total-done, 0)) / rate * float64(time.Second))
	return float64(int(rate*10)) / 10, left.Round(time.Second)
}
