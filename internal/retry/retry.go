// Package retry holds the pacing the relay uses around failures: capped
// exponential backoff for reconnects and retries, and a limiter that keeps
// a repeated log line from flooding the log during a long outage.
package retry

import "time"

// Backoff yields waits that double from Start up to Max.
type Backoff struct {
	start, max, cur time.Duration
}

// NewBackoff returns a Backoff starting at start and capped at max.
func NewBackoff(start, max time.Duration) *Backoff {
	return &Backoff{start: start, max: max, cur: start}
}

// Next returns the next wait.
func (b *Backoff) Next() time.Duration {
	d := b.cur
	b.cur = min(b.cur*2, b.max)
	return d
}

// Reset starts again from the first wait.
func (b *Backoff) Reset() { b.cur = b.start }

// LogLimiter lets a repeated log line through at growing intervals: 1 s,
// 2 s, 4 s … up to a minute.
type LogLimiter struct {
	next time.Time
	gap  time.Duration
}

// NewLogLimiter returns a limiter that lets the first line through.
func NewLogLimiter() *LogLimiter { return &LogLimiter{gap: time.Second} }

// Allow reports whether to log now.
func (l *LogLimiter) Allow() bool {
	now := time.Now()
	if now.Before(l.next) {
		return false
	}
	l.next = now.Add(l.gap)
	l.gap = min(l.gap*2, time.Minute)
	return true
}
