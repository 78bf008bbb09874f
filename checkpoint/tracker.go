// Package checkpoint decides which WAL position is safe to confirm to
// Postgres, and keeps the relay's record of its slot.
//
// The rule it enforces is the relay's core promise: the flush LSN sent to
// Postgres never passes an event whose publish JetStream has not
// acknowledged. A Tracker sees, in WAL order, every event handed to the
// sink (with the sink's sequence number for it) and every point where
// confirming would be safe once everything before it is acknowledged: the
// end of a transaction, or a keepalive received outside any transaction.
// Given how far the sink's acknowledgements reach, it returns the newest
// such point.
package checkpoint

import (
	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/decode"
)

// Tracker is the LSN bookkeeping of one relay process. It is not safe for
// concurrent use: the replication goroutine owns it.
type Tracker struct {
	last    decode.Position // newest event handed to the sink
	hasLast bool
	lastSeq uint64 // the sink's sequence number for it
	marks   []mark // pending confirmable points, oldest first
	head    int    // marks[:head] are consumed
	flushed pglogrepl.LSN
}

// mark is a position that becomes confirmable once the sink has
// acknowledged every sequence number up to and including seq.
type mark struct {
	seq uint64
	lsn pglogrepl.LSN
}

// NewTracker returns a Tracker that starts confirming at flushed (the
// slot's confirmed_flush_lsn).
func NewTracker(flushed pglogrepl.LSN) *Tracker {
	return &Tracker{flushed: flushed}
}

// Resume makes the Tracker skip events at or before pos: they are in the
// stream already.
func (t *Tracker) Resume(pos decode.Position) {
	t.last, t.hasLast = pos, true
}

// Seen reports whether the event at pos was already handed to the sink, or
// was in the stream when the relay started. Postgres replays transactions
// after a reconnect; those events must not be published twice.
func (t *Tracker) Seen(pos decode.Position) bool { return t.hasLast && !t.last.Less(pos) }

// Handed records that the event at pos went to the sink as sequence seq.
// Sequence numbers grow by one for each event, starting at 1.
func (t *Tracker) Handed(pos decode.Position, seq uint64) {
	t.last, t.hasLast, t.lastSeq = pos, true, seq
}

// Last returns the position of the newest event handed to the sink.
func (t *Tracker) Last() decode.Position { return t.last }

// Commit records that every event of the transaction ending at end has been
// handed to the sink.
func (t *Tracker) Commit(end pglogrepl.LSN) { t.mark(end) }

// Idle records a keepalive's WAL end received while no transaction was
// open: everything the server sent before it has been handed over, so it
// is confirmable once those events are acknowledged. This is what keeps
// the slot moving while the outbox is idle and other tables are busy.
func (t *Tracker) Idle(walEnd pglogrepl.LSN) { t.mark(walEnd) }

func (t *Tracker) mark(lsn pglogrepl.LSN) {
	if n := len(t.marks); n > t.head && t.marks[n-1].seq == t.lastSeq {
		// Nothing was handed over since the previous mark: it moves forward
		// instead of queueing, so marks stay bounded by events in flight.
		t.marks[n-1].lsn = max(t.marks[n-1].lsn, lsn)
		return
	}
	if t.head > 0 && t.head >= len(t.marks)/2 {
		// Reclaim the consumed half, so marks stay bounded by the pending
		// ones even when they are never all consumed at once.
		n := copy(t.marks, t.marks[t.head:])
		t.marks, t.head = t.marks[:n], 0
	}
	t.marks = append(t.marks, mark{seq: t.lastSeq, lsn: lsn})
}

// Flushed returns the newest LSN that is safe to confirm when the sink has
// acknowledged every sequence number up to ackedThrough.
func (t *Tracker) Flushed(ackedThrough uint64) pglogrepl.LSN {
	for t.head < len(t.marks) && t.marks[t.head].seq <= ackedThrough {
		t.flushed = max(t.flushed, t.marks[t.head].lsn)
		t.head++
	}
	return t.flushed
}

// Fork takes back every confirmable point beyond at: the WAL there is
// another timeline's now (a promotion, a point-in-time recovery forked at
// at). Keepalives had marked positions of the old timeline past the last
// event; the new timeline writes other transactions there, which
// confirming those positions would skip. Points beyond at become at, which
// both timelines share: confirmable once the events before them are
// acknowledged, as before.
func (t *Tracker) Fork(at pglogrepl.LSN) {
	t.flushed = min(t.flushed, at)
	for i := t.head; i < len(t.marks); i++ {
		t.marks[i].lsn = min(t.marks[i].lsn, at)
	}
}

// Pending returns how many confirmable points wait for acknowledgements.
func (t *Tracker) Pending() int { return len(t.marks) - t.head }
