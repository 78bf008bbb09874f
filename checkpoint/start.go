package checkpoint

import (
	"fmt"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/contract"
)

// Action is what the relay does at start with its slot.
type Action int

const (
	// Resume streams from the existing slot.
	Resume Action = iota
	// Bootstrap creates the slot and first publishes the rows already in
	// the table, from the slot's snapshot.
	Bootstrap
	// RedoBootstrap drops a slot whose initial publish never finished
	// (nothing was streamed from it yet) and bootstraps again.
	RedoBootstrap
	// Adopt streams from a slot the relay did not create, records it, and
	// warns that rows older than the slot are not published.
	Adopt
	// Repair (asked for by the operator) creates a new slot and publishes
	// from its snapshot every row the stream lacks: the way back from a gap
	// (contract.ErrGap).
	Repair
	// RedoRepair starts over a repair that did not finish, with the same
	// bounds, whatever became of its slot.
	RedoRepair
)

func (a Action) String() string {
	return [...]string{"resume", "bootstrap", "redo-bootstrap", "adopt", "repair", "redo-repair"}[a]
}

// SlotState is what the relay knows about its slot at start.
type SlotState struct {
	Name        string
	Exists      bool
	Confirmed   pglogrepl.LSN // the slot's confirmed_flush_lsn
	Lost        bool          // wal_status = lost
	Record      Record
	StreamCount uint64 // messages of this relay already in the stream
}

// GapError means events may be missing from the stream: the relay refuses
// to go on silently. It wraps contract.ErrGap; the repair (a new slot
// publishing from its snapshot every committed row the stream lacks) is the
// caller's to offer.
type GapError struct {
	// What says what happened and what may be missing.
	What string
	// Fix holds advice other than the repair itself; usually empty.
	Fix string
}

func (e *GapError) Error() string {
	if e.Fix == "" {
		return e.What
	}
	return e.What + ": " + e.Fix
}

// Unwrap returns contract.ErrGap, so errors.Is(err, contract.ErrGap)
// holds for every GapError.
func (e *GapError) Unwrap() error { return contract.ErrGap }

func gapf(format string, args ...any) *GapError {
	return &GapError{What: fmt.Sprintf(format, args...)}
}

// Decide chooses the start-up action, or returns a *GapError (which wraps
// contract.ErrGap) when the slot cannot be trusted to hold every event
// the stream still lacks.
func Decide(s SlotState) (Action, error) {
	r := s.Record
	if r.Exists && !r.Bootstrapped {
		return redo(s)
	}
	switch {
	case s.Exists && s.Lost:
		return 0, gapf("replication slot %q was invalidated (wal_status lost): Postgres removed WAL it still needed, so events committed after %s may never reach the stream", s.Name, s.Confirmed)
	case !s.Exists && !r.Exists:
		if s.StreamCount > 0 {
			return 0, gapf("the stream holds %d messages from an outbox relay, but there is no replication slot %q and no record of one: starting a new slot now would skip whatever was committed in between", s.StreamCount, s.Name)
		}
		return Bootstrap, nil
	case !s.Exists:
		return 0, gapf("replication slot %q was dropped after the relay streamed from it (it had confirmed up to %s): WAL written since was never decoded", s.Name, r.Limit)
	case !r.Exists:
		if s.StreamCount > 0 {
			return 0, gapf("replication slot %q exists but the relay has no record of it, and the stream already holds %d messages: the slot may have been recreated after events were published", s.Name, s.StreamCount)
		}
		return Adopt, nil
	case s.Confirmed > r.Allowed():
		return 0, gapf("%s", beyondMessage(s.Name, s.Confirmed, r))
	}
	return Resume, nil
}

// redo decides for a take-up that did not finish. Nothing ever streams
// from such a slot, so it is dropped and the take-up done again the same
// way: a repair always (it compares the table with the stream), the
// initial publish unless the slot moved since its creation, which only
// someone else can have done.
func redo(s SlotState) (Action, error) {
	r := s.Record
	switch {
	case r.Kind == KindRepair:
		return RedoRepair, nil
	case !s.Exists || r.CreatedLSN == 0 || s.Confirmed == r.CreatedLSN:
		return RedoBootstrap, nil
	}
	return 0, gapf("replication slot %q moved to %s although the relay never finished publishing the rows present at its creation (%s)", s.Name, s.Confirmed, r.CreatedLSN)
}

// beyondMessage says that slot, found at confirmed, is beyond anything the
// relay whose record is r confirmed.
func beyondMessage(slot string, confirmed pglogrepl.LSN, r Record) string {
	if r.Stopped != 0 {
		return fmt.Sprintf("replication slot %q is at %s, beyond where this relay stopped (%s, confirmed and recorded at its last clean stop): it was dropped and recreated, or advanced by hand, and events in between may be missing",
			slot, confirmed, r.Stopped)
	}
	return fmt.Sprintf("replication slot %q is at %s, beyond anything this relay confirmed (%s): it was dropped and recreated, or advanced by hand, and events in between may be missing",
		slot, confirmed, r.Limit)
}
