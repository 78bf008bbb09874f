package checkpoint

import (
	"context"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/retry"
)

// Ledger writes down how far the relay may confirm before it confirms, so
// that a slot found beyond that record later is known not to be the
// relay's work (dropped and recreated, or advanced by hand).
//
// Writing on every confirmation would feed itself: each write is WAL, the
// next keepalive reports it, confirming it means another write. So the
// Ledger writes at most once a second, and only when it must: published
// events wait to be confirmed, or the position moved a whole step (1 MiB)
// on keepalives alone, or the relay is shutting down. Otherwise it
// confirms the recorded limit, and the slot trails by less than a step.
type Ledger struct {
	store     *Store
	limit     pglogrepl.LSN
	step      uint64
	minGap    time.Duration
	lastWrite time.Time
	log       zerolog.Logger
	logs      *retry.LogLimiter
}

// NewLedger returns a Ledger whose record currently allows limit.
func NewLedger(store *Store, limit pglogrepl.LSN, log zerolog.Logger) *Ledger {
	return &Ledger{store: store, limit: limit, step: 1 << 20, minGap: time.Second, log: log, logs: retry.NewLogLimiter()}
}

// Urgency says how much confirming matters now.
type Urgency int

const (
	// Routine: only keepalives moved the position.
	Routine Urgency = iota
	// EventsWaiting: transactions with events are acknowledged beyond the
	// recorded limit.
	EventsWaiting
	// Final: the relay is about to stop.
	Final
)

// Confirmable returns the newest position up to flushed that the record
// allows, raising the record first when it is due.
func (l *Ledger) Confirmable(ctx context.Context, flushed pglogrepl.LSN, u Urgency) pglogrepl.LSN {
	if flushed <= l.limit {
		return flushed
	}
	if u == Routine && uint64(flushed-l.limit) < l.step {
		return l.limit
	}
	if u != Final && time.Since(l.lastWrite) < l.minGap {
		return l.limit
	}
	l.lastWrite = time.Now()
	if err := l.store.RaiseLimit(ctx, flushed); err != nil {
		if l.logs.Allow() {
			l.log.Warn().Err(err).Msg("cannot record the confirm limit; confirming only up to the recorded one")
		}
		return l.limit
	}
	l.limit = flushed
	return flushed
}

// Limit returns the recorded limit.
func (l *Ledger) Limit() pglogrepl.LSN { return l.limit }
