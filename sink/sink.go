// Package sink is the seam between a relay and where its events go: what
// the pipeline needs of a destination (Destination), what the relay reads
// back from it (Reader), and what every destination shares: the source
// stamped on each message (Source, Stamp), events as stored (StoredEvent)
// and subjects rendered from row values (Template).
//
// The relay's guarantees rest on two methods. AckedThrough says how far
// the unbroken run of durably stored events reaches: the only progress
// safe to confirm to Postgres. Reader.Tail says which events of a coming
// replay the destination holds already, so that exactly those are
// skipped.
//
// The implementations: sink/jetstream, NATS JetStream, the relay's
// destination; sink/memory, an in-memory one for tests of the pipeline.
package sink

import (
	"context"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/decode"
)

// Destination takes a relay's events in order and says how far it holds
// them durably.
//
// Offer, Publish, Room, EndBatch, AckedThrough, Pending and Rejects belong
// to one goroutine (the one reading the source); Run to another, owned by
// the relay's lifecycle; Drain may be called from either once nothing
// more is offered.
type Destination interface {
	// Offer hands ev over without blocking and returns its sequence
	// number: 1 for the first event, then one more for each. ok is false
	// when the destination has no room: wait on Room and offer again.
	// The destination copies what it keeps of ev.
	Offer(ev *decode.Event) (seq uint64, ok bool)
	// Publish is Offer for callers that may block: it waits for room.
	Publish(ctx context.Context, ev *decode.Event) (seq uint64, err error)
	// Room signals that an Offer refused for lack of room may succeed now.
	Room() <-chan struct{}
	// EndBatch says that the events of one source transaction, the first
	// of which was offered at start, have all been offered.
	EndBatch(start time.Time)
	// AckedThrough returns the newest sequence number that, with every
	// earlier one, the destination holds durably (or sent to its
	// dead-letter subject).
	AckedThrough() uint64
	// Pending returns how many events handed over are not settled yet.
	Pending() int
	// Rejects returns why ev can never be published as it is (it would
	// go to the dead-letter subject), or "".
	Rejects(ev *decode.Event) string
	// Drain waits until every event handed over is settled, or ctx ends.
	Drain(ctx context.Context) error
	// Run does the destination's background work (expiring overdue
	// acknowledgements, recovering from failures) until ctx ends. Without
	// it an outage never ends.
	Run(ctx context.Context) error
	// Close releases the destination; call it after Run returned.
	Close() error
}

// Reader reads back what a destination holds of one relay's events: the
// relay whose source the Reader was made with.
type Reader interface {
	// Last returns the newest event the relay published (its own
	// messages and those of relays older than the Outbox-Source-*
	// headers, which may be its own), or nil when there is none.
	Last(ctx context.Context) (*StoredEvent, error)
	// Tail calls fn, in stored order, for every event of the relay's
	// table (Source.SameTable: any slot of the same system and table)
	// stored from where the messages reach from on, with a commit position
	// at or after from, or with none (commit LSN 0/0: rows published from
	// the table): the events a slot confirmed at from will replay that the
	// destination holds already.
	Tail(ctx context.Context, from pglogrepl.LSN, fn func(StoredEvent)) error
	// Scan calls fn, in stored order, for every message on the relay's
	// subjects stored at or after since (zero: from the first), until fn
	// returns false. ok is false for a message without readable relay
	// headers: only its Seq, Subject, Time, ID and CreatedAt are set.
	Scan(ctx context.Context, since time.Time, fn func(ev StoredEvent, ok bool) bool) error
	// Owner returns the source the Reader reads back as the relay's (zero
	// when it reads every relay's messages as its own).
	Owner() Source
	// Horizon returns how far back the destination still holds events
	// when its own limits (an age, a size, a count) have removed older
	// messages, or nil when it removed none.
	Horizon(ctx context.Context) (*Horizon, error)
}

// Horizon is where a destination's own limits have removed its older
// messages: events created before Before may be gone without ever having
// been missing, and a take-up that publishes what the destination lacks
// must not publish them again.
type Horizon struct {
	// Before is the row time (created_at) the destination holds events
	// from: that of Oldest, or when it holds none of the relay's, the
	// time its oldest message (or, empty, its last one) was stored.
	Before time.Time
	// Oldest is the oldest event of the relay's it still holds, if any.
	Oldest *StoredEvent
	// Limits names the limits, for people ("max age 24h0m0s").
	Limits string
}
