// Package memory is a destination in memory: a sink.Destination that
// keeps what it is offered until the test acknowledges it, and a
// sink.Reader of what it holds. It lets the relay's pipeline (skipping,
// numbering, the confirm rule) be tested without servers, and shows what
// another destination has to provide. The relay's promise itself is
// tested on real Postgres and JetStream.
package memory

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Sink is an in-memory destination. Offered events wait, in order, until
// Ack stores them; at most Window wait at once.
type Sink struct {
	window int
	stamp  *sink.Stamp
	room   chan struct{}

	mu      sync.Mutex
	waiting []decode.Event     // offered, not acknowledged yet
	stored  []sink.StoredEvent // in stored order
	acked   uint64             // sequence number of the newest acknowledged event
	next    uint64             // sequence number of the next event offered
	changed chan struct{}      // closed and replaced when an event is acknowledged
	reject  func(*decode.Event) string
}

var (
	_ sink.Destination = (*Sink)(nil)
	_ sink.Reader      = (*Sink)(nil)
)

// New returns a Sink with room for window events awaiting acknowledgement
// (at least 1), stamping stored events with stamp's source (none when nil).
func New(window int, stamp *sink.Stamp) *Sink {
	return &Sink{window: max(window, 1), stamp: stamp, room: make(chan struct{}, 1), next: 1, changed: make(chan struct{})}
}

// RejectWith makes Rejects (and the events offered) answer with reject:
// an event it gives a reason for is stored as a dead letter.
func (s *Sink) RejectWith(reject func(*decode.Event) string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reject = reject
}

// Offer takes ev when fewer than the window's events await their
// acknowledgement.
func (s *Sink) Offer(ev *decode.Event) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiting) >= s.window {
		return 0, false
	}
	e := *ev
	e.Payload = append([]byte(nil), ev.Payload...)
	s.waiting = append(s.waiting, e)
	seq := s.next
	s.next++
	return seq, true
}

// Publish offers ev, waiting for room.
func (s *Sink) Publish(ctx context.Context, ev *decode.Event) (uint64, error) {
	for {
		if seq, ok := s.Offer(ev); ok {
			return seq, nil
		}
		select {
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		case <-s.room:
		}
	}
}

// Room signals that an acknowledgement made room.
func (s *Sink) Room() <-chan struct{} { return s.room }

// EndBatch does nothing: a memory sink keeps no metrics.
func (s *Sink) EndBatch(time.Time) {}

// AckedThrough returns the newest acknowledged sequence number.
func (s *Sink) AckedThrough() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked
}

// Pending returns how many events await acknowledgement.
func (s *Sink) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting)
}

// Rejects returns the reason RejectWith gives, or the decoder's problem.
func (s *Sink) Rejects(ev *decode.Event) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rejectLocked(ev)
}

func (s *Sink) rejectLocked(ev *decode.Event) string {
	if ev.Problem != "" {
		return ev.Problem
	}
	if s.reject != nil {
		return s.reject(ev)
	}
	return ""
}

// Ack stores the n oldest events awaiting acknowledgement (all of them
// when n is larger), in order, and returns how many it stored.
func (s *Sink) Ack(n int) int {
	s.mu.Lock()
	n = min(n, len(s.waiting))
	for _, ev := range s.waiting[:n] {
		s.storeLocked(&ev)
	}
	s.waiting = s.waiting[n:]
	s.acked += uint64(n)
	if n > 0 {
		close(s.changed)
		s.changed = make(chan struct{})
	}
	s.mu.Unlock()
	if n > 0 {
		select {
		case s.room <- struct{}{}:
		default:
		}
	}
	return n
}

func (s *Sink) storeLocked(ev *decode.Event) {
	st := sink.StoredEvent{
		Seq: uint64(len(s.stored) + 1), Time: time.Now(), ID: sink.StoredID(ev), Position: ev.Position,
		AggregateType: ev.AggregateType, AggregateID: ev.AggregateID, CreatedAt: ev.CreatedAt,
		Source: s.stamp.Source(),
	}
	if reason := s.rejectLocked(ev); reason != "" {
		st.DeadLetter, st.Reason = true, reason
	}
	s.stored = append(s.stored, st)
}

// Put stores ev as another relay, or this one before a restart, did.
func (s *Sink) Put(ev sink.StoredEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ev.Seq = uint64(len(s.stored) + 1)
	s.stored = append(s.stored, ev)
}

// Drain waits until every offered event is acknowledged, or ctx ends.
func (s *Sink) Drain(ctx context.Context) error {
	for {
		s.mu.Lock()
		done, changed := len(s.waiting) == 0, s.changed
		s.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-changed:
		}
	}
}

// Run waits for ctx: a memory sink has no background work.
func (s *Sink) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// Close does nothing.
func (s *Sink) Close() error { return nil }

// Horizon returns nil: a memory sink has no limits and removes nothing.
func (s *Sink) Horizon(context.Context) (*sink.Horizon, error) { return nil, nil }

// Owner returns the source stored events are stamped with.
func (s *Sink) Owner() sink.Source { return s.stamp.Source() }

// Last returns the newest stored event the owner may have published.
func (s *Sink) Last(context.Context) (*sink.StoredEvent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.stored) - 1; i >= 0; i-- {
		if sink.OwnedBy(s.stored[i], s.stamp.Source()) {
			ev := s.stored[i]
			return &ev, nil
		}
	}
	return nil, nil
}

// Tail calls fn for the stored events of the owner's table (any slot) at
// or after from, or published from the table (commit LSN 0/0); it reads
// the whole sink, where the JetStream reader searches for the tail's start.
func (s *Sink) Tail(_ context.Context, from pglogrepl.LSN, fn func(sink.StoredEvent)) error {
	owner := s.Owner()
	if owner.Origin == 0 {
		return nil // as the JetStream reader: nothing is known to be the slot's
	}
	for _, ev := range s.snapshot() {
		if (ev.Position.CommitLSN >= from || ev.Position.CommitLSN == 0) && owner.SameTable(ev.Source) {
			fn(ev)
		}
	}
	return nil
}

// Scan calls fn for every stored event stored at or after since.
func (s *Sink) Scan(_ context.Context, since time.Time, fn func(sink.StoredEvent, bool) bool) error {
	for _, ev := range s.snapshot() {
		if !ev.Time.Before(since) && !fn(ev, true) {
			return nil
		}
	}
	return nil
}

// Stored returns what the sink holds, in stored order.
func (s *Sink) Stored() []sink.StoredEvent { return s.snapshot() }

func (s *Sink) snapshot() []sink.StoredEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sink.StoredEvent(nil), s.stored...)
}
