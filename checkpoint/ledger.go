package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/retry"
)

// Slack is how far past its recorded limit the relay confirms without
// writing the record again.
//
// Writing on every confirmation would feed itself: each write is WAL, the
// next keepalive reports it, confirming it means another write, forever,
// on an idle database. Within Slack of the record the relay confirms
// freely: its own writes, a shutdown checkpoint (which a stopping Postgres
// waits to see confirmed), a few small transactions elsewhere all fit.
// The price: after a stop that was not clean (a crash, SIGKILL), a slot
// dropped and recreated under the same name, or advanced by hand, less
// than Slack of WAL past the relay's last record, is not recognised. A
// clean stop records exactly where the relay stopped (Record.Stopped), and
// any move past it is.
const Slack = 64 << 10

// Ledger writes down how far the relay may confirm before it confirms, so
// that a slot found beyond that record later is known not to be the
// relay's work: dropped and recreated, or advanced by hand.
type Ledger struct {
	mu        sync.Mutex
	store     *Store
	created   pglogrepl.LSN // the slot's creation point in the record
	limit     pglogrepl.LSN
	stopped   pglogrepl.LSN // Record.Stopped, as Refresh read it
	minGap    time.Duration
	lastWrite time.Time
	log       zerolog.Logger
	logs      *retry.LogLimiter
}

// NewLedger returns a Ledger over the record of the slot created at
// created, which currently allows limit.
func NewLedger(store *Store, created, limit pglogrepl.LSN, log zerolog.Logger) *Ledger {
	return &Ledger{store: store, created: created, limit: limit, minGap: 200 * time.Millisecond, log: log, logs: retry.NewLogLimiter()}
}

// Confirmable returns the newest position up to flushed that the record
// allows, raising the record first when flushed is beyond it: at most once
// a second, except for the final confirmation before the relay stops.
func (l *Ledger) Confirmable(ctx context.Context, flushed pglogrepl.LSN, final bool) pglogrepl.LSN {
	l.mu.Lock()
	defer l.mu.Unlock()
	allowed := l.limit + Slack
	if flushed <= allowed {
		return flushed
	}
	if !final && time.Since(l.lastWrite) < l.minGap {
		return allowed
	}
	l.lastWrite = time.Now()
	if err := l.store.RaiseLimit(ctx, flushed); err != nil {
		if l.logs.Allow() {
			l.log.Warn().Err(err).Msg("cannot record the confirm limit; confirming only up to the recorded one")
		}
		return allowed
	}
	l.limit = flushed
	return flushed
}

// Refresh reloads the limit from the record: another relay on the same
// slot (this one was its standby) raised it while it was active. It fails
// with ErrRecordChanged when the record is no longer that of a finished
// take-up of the slot this relay took up: a slot whose take-up is
// unfinished is never streamed.
func (l *Ledger) Refresh(ctx context.Context) error {
	rec, err := l.store.Load(ctx)
	if err != nil {
		return err
	}
	if !rec.Exists {
		return errors.New("the relay's record of its slot disappeared")
	}
	if !rec.Bootstrapped || rec.CreatedLSN != l.created {
		return &contract.FatalError{
			Err: fmt.Errorf("%w: it now records a slot created at %s (take-up finished: %v), not the one this relay took up at %s",
				ErrRecordChanged, rec.CreatedLSN, rec.Bootstrapped, l.created),
			Hint: "restart the relay: it takes up the slot again as the record says",
		}
	}
	l.mu.Lock()
	l.limit = max(l.limit, rec.Limit)
	l.stopped = rec.Stopped
	l.mu.Unlock()
	return nil
}

// Moved says why a slot found at confirmed, as a session starts, cannot be
// the relay's own work ("" when it can): it is beyond where the relay
// stopped, when the record (as Refresh read it) says it last stopped
// cleanly, or else beyond its limit plus Slack.
func (l *Ledger) Moved(slot string, confirmed pglogrepl.LSN) string {
	l.mu.Lock()
	r := Record{Limit: l.limit, Stopped: l.stopped}
	l.mu.Unlock()
	if confirmed <= r.Allowed() {
		return ""
	}
	return beyondMessage(slot, confirmed, r)
}

// Streaming records that a session streams from the slot: from now on it
// moves, and only the limit bounds it.
func (l *Ledger) Streaming(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped == 0 {
		return nil
	}
	if err := l.store.ClearStop(ctx, l.created); err != nil {
		return err
	}
	l.stopped = 0
	return nil
}

// Stopped records that the relay stopped cleanly at confirmed, the final
// position Postgres confirmed; the session must still hold the slot.
func (l *Ledger) Stopped(ctx context.Context, confirmed pglogrepl.LSN) error {
	return l.store.RecordStop(ctx, l.created, confirmed)
}
