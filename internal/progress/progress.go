// Package progress shows how far a long piece of work got: the count done,
// the total, the rate and the time left at that rate. A Reporter, chosen
// by the caller, shows it: Log writes a line every interval (the relay
// daemon, and a command whose stderr is not a terminal), Bar redraws one
// line in place on a terminal. A replay, a take-up publishing a backlog,
// verify over a big table and cleanup use it.
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

// Snapshot is a meter's progress at one time.
type Snapshot struct {
	// Msg says what the work is.
	Msg string
	// Unit names the items counted ("rows" unless set).
	Unit  string
	Done  int
	Total int // 0: not known
	// Elapsed is the time since the meter began; At is now.
	Elapsed time.Duration
	At      time.Time
}

// Rate returns items a second and the time left at that rate (0 while
// nothing is done or the total is not known).
func (s Snapshot) Rate() (float64, time.Duration) {
	if s.Done == 0 || s.Elapsed <= 0 {
		return 0, 0
	}
	rate := float64(s.Done) / s.Elapsed.Seconds()
	left := time.Duration(float64(max(s.Total-s.Done, 0)) / rate * float64(time.Second))
	return float64(int(rate*10)) / 10, left.Round(time.Second)
}

// Reporter shows the progress of one meter at a time.
type Reporter interface {
	// Interval is how often the reporter is shown progress when the
	// caller asks for every (0: its default; negative: never).
	Interval(every time.Duration) time.Duration
	// Show shows the progress so far.
	Show(s Snapshot)
	// Finish shows the work ended, at s.
	Finish(s Snapshot)
}

// Log returns the reporter writing a log line with the count, the total,
// the rate and the time left every interval (DefaultEvery by default).
func Log(log zerolog.Logger) Reporter { return logReporter{log} }

type logReporter struct{ log zerolog.Logger }

func (logReporter) Interval(every time.Duration) time.Duration {
	if every == 0 {
		return DefaultEvery
	}
	return every
}

func (r logReporter) Show(s Snapshot) {
	rate, left := s.Rate()
	e := r.log.Info().Int("done", s.Done)
	if s.Total > 0 {
		e = e.Int("total", s.Total)
	}
	e = e.Float64("rows_per_second", rate)
	if s.Total > 0 {
		e = e.Dur("left", left)
	}
	e.Msg(s.Msg)
}

// Finish logs nothing: the callers log what the work did.
func (logReporter) Finish(Snapshot) {}

// Meter counts work done of a total and reports it.
type Meter struct {
	msg, unit string
	total     int
	n         atomic.Int64
	began     time.Time
	now       func() time.Time
	r         Reporter
}

// New returns a meter of total items (0: not known) whose log lines say
// msg.
func New(msg string, total int, log zerolog.Logger) *Meter {
	return NewTo(msg, total, Log(log))
}

// NewTo returns a meter of total items (0: not known) that r shows.
func NewTo(msg string, total int, r Reporter) *Meter {
	return &Meter{msg: msg, unit: "rows", total: max(total, 0), began: time.Now(), now: time.Now, r: r}
}

// Counting names the items counted (rows by default) and returns m.
func (m *Meter) Counting(unit string) *Meter {
	m.unit = unit
	return m
}

// Add counts one item done.
func (m *Meter) Add() { m.n.Add(1) }

// AddN counts n items done.
func (m *Meter) AddN(n int64) { m.n.Add(n) }

// Done is how many items are done.
func (m *Meter) Done() int { return int(m.n.Load()) }

// Every shows the progress each interval (the reporter's default when
// zero; never when negative) until the returned stop is called, which
// then shows the work ended.
func (m *Meter) Every(ctx context.Context, interval time.Duration) (stop func()) {
	interval = m.r.Interval(interval)
	if interval < 0 {
		return func() {}
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
			case <-t.C:
				m.Line(m.now())
			}
		}
	}()
	return func() {
		cancel()
		wg.Wait()
		m.r.Finish(m.Snapshot(m.now()))
	}
}

// Snapshot is the progress as of now.
func (m *Meter) Snapshot(now time.Time) Snapshot {
	return Snapshot{Msg: m.msg, Unit: m.unit, Done: m.Done(), Total: m.total, Elapsed: now.Sub(m.began), At: now}
}

// Line shows the progress as of now.
func (m *Meter) Line(now time.Time) { m.r.Show(m.Snapshot(now)) }
