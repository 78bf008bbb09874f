// Package startup times a relay process's start-up, phase by phase, from
// the start of main to its first PubAck, for one log line that tells an
// operator where the time went.
//
// A Trace travels in the context (as net/http/httptrace's does), so that
// the packages that run a phase (relay, replication) mark it without a
// parameter on every call in between. Every method is safe on a nil
// Trace and from several goroutines: phases run concurrently (NATS beside
// Postgres), so each is a span with its own start, not a step after the
// previous one. Once finished, a Trace ignores further phases: later
// reconnects are not start-up.
package startup

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Trace records the phases of one start-up.
type Trace struct {
	origin time.Time
	log    zerolog.Logger

	mu    sync.Mutex
	spans []span
	done  bool
}

type span struct {
	name     string
	at, took time.Duration // from the origin, and how long
}

// New returns a Trace whose phases count from origin (the start of main),
// logging on log.
func New(origin time.Time, log zerolog.Logger) *Trace {
	return &Trace{origin: origin, log: log}
}

type key struct{}

// NewContext returns ctx carrying t.
func NewContext(ctx context.Context, t *Trace) context.Context {
	return context.WithValue(ctx, key{}, t)
}

// FromContext returns the Trace ctx carries, or nil.
func FromContext(ctx context.Context) *Trace {
	t, _ := ctx.Value(key{}).(*Trace)
	return t
}

// Phase starts the phase name of ctx's Trace and returns the function
// that ends it.
func Phase(ctx context.Context, name string) func() {
	return FromContext(ctx).Phase(name)
}

// Phase starts the phase name and returns the function that ends it.
func (t *Trace) Phase(name string) func() {
	if t == nil {
		return func() {}
	}
	start := time.Now()
	return func() { t.Since(name, start) }
}

// Since records the phase name, from start until now.
func (t *Trace) Since(name string, start time.Time) {
	if t == nil {
		return
	}
	end := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return
	}
	t.spans = append(t.spans, span{name: name, at: start.Sub(t.origin), took: end.Sub(start)})
	if e := t.log.Debug(); e.Enabled() {
		e.Str("phase", name).Dur("at", start.Sub(t.origin)).Dur("took", end.Sub(start)).Msg("start-up phase")
	}
}

// Finish logs, once, how long the start-up took and each phase's share:
// until says what ended it (the first PubAck, or the relay caught up with
// nothing to publish).
func (t *Trace) Finish(until string) {
	if t == nil {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return
	}
	t.done = true
	phases := zerolog.Dict()
	for _, s := range t.spans {
		phases.Str(s.name, formatSpan(s))
	}
	t.log.Info().Dur("took", now.Sub(t.origin)).Str("until", until).Dict("phases", phases).
		Msg("start-up took")
}

// Done reports whether the Trace has finished (a nil one has).
func (t *Trace) Done() bool {
	if t == nil {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.done
}

// formatSpan writes a span as "<took> at <start>", both in milliseconds
// from the origin: concurrent phases overlap, so their durations do not
// add up to the total.
func formatSpan(s span) string {
	return ms(s.took) + " at " + ms(s.at)
}

func ms(d time.Duration) string { return d.Round(100 * time.Microsecond).String() }
