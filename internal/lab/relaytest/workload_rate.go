package relaytest

import (
	"context"
	"sync"
	"time"
)

// pacer spreads a Workload's events over time at a target rate shared by
// all its writers: each transaction reserves its rows' share of time and
// waits for its turn. A writer that falls behind (Postgres restarting, a
// slow machine) does not make up for it with a burst later: the schedule
// restarts from now, so the rate stays at or under the target.
type pacer struct {
	mu    sync.Mutex
	every time.Duration // per event
	next  time.Time
}

func newPacer(rate float64) *pacer {
	return &pacer{every: time.Duration(float64(time.Second) / rate)}
}

// wait blocks until the next events may be written, or ctx ends.
func (p *pacer) wait(ctx context.Context, events int) {
	p.mu.Lock()
	now := time.Now()
	if p.next.Before(now) {
		p.next = now
	}
	at := p.next
	p.next = p.next.Add(time.Duration(events) * p.every)
	p.mu.Unlock()
	if d := time.Until(at); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

// Achieved is the rate at which the workload committed events, from its first
// Run to now or to the end of its last Run: events per second of writing.
func (w *Workload) Achieved() (events int, over time.Duration, perSecond float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	end := w.ended
	if end.IsZero() {
		end = time.Now()
	}
	events, over = len(w.committed), end.Sub(w.started)
	if w.started.IsZero() || over <= 0 {
		return events, 0, 0
	}
	return events, over, float64(events) / over.Seconds()
}
