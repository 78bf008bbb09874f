package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/sink"
)

// Read says what ForEach reads.
type Read struct {
	// From is the first sequence; zero means the beginning, or Since.
	From uint64
	// Since starts at the first message stored at or after it.
	Since time.Time
	// HeadersOnly leaves the payloads on the server.
	HeadersOnly bool
	// brief marks a short read (a lookup of the tail search): its consumer
	// is removed by the server soon after, not after the default five
	// minutes.
	brief bool
}

// fetchBatch is how many messages one request of a read fetches.
const fetchBatch = 1000

// noResponderRetries bounds the fetches in a row that no server answers
// (about 25 s with the growing pause between them).
const noResponderRetries = 50

// ForEach calls fn for every message on subjects stored from the starting
// point up to the stream's last sequence at the time of the call, in
// stream order, until fn returns false.
func ForEach(ctx context.Context, stream natsjs.Stream, subjects []string, read Read, fn func(*natsjs.RawStreamMsg) bool) error {
	info, err := stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("read stream info: %w", err)
	}
	if info.State.Msgs == 0 {
		return nil
	}
	return readRange(ctx, stream, info.Config.Name, subjects, read, info.State.LastSeq, fn)
}

// readRange is ForEach up to sequence last, on the stream called name.
func readRange(ctx context.Context, stream natsjs.Stream, name string, subjects []string, read Read, last uint64, fn func(*natsjs.RawStreamMsg) bool) error {
	if read.From > last {
		return nil
	}
	cfg := natsjs.OrderedConsumerConfig{FilterSubjects: subjects, HeadersOnly: read.HeadersOnly}
	if read.brief {
		cfg.InactiveThreshold = 10 * time.Second
	}
	batchSize := fetchBatch
	switch {
	case read.From > 1:
		cfg.DeliverPolicy, cfg.OptStartSeq = natsjs.DeliverByStartSequencePolicy, read.From
		batchSize = int(min(last-read.From+1, fetchBatch))
	case !read.Since.IsZero():
		cfg.DeliverPolicy, cfg.OptStartTime = natsjs.DeliverByStartTimePolicy, &read.Since
	}
	cons, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("read stream %q: %w", name, err)
	}
	unanswered := 0
	for {
		batch, err := cons.FetchNoWait(batchSize)
		n := 0
		if err == nil {
			for m := range batch.Messages() {
				n++
				meta, err := m.Metadata()
				if err != nil {
					return err
				}
				seq := meta.Sequence.Stream
				if seq > last {
					return nil
				}
				if !fn(&natsjs.RawStreamMsg{Subject: m.Subject(), Sequence: seq, Header: m.Headers(), Data: m.Data(), Time: meta.Timestamp}) || seq == last {
					return nil
				}
			}
			err = batch.Error()
		}
		if errors.Is(err, nats.ErrNoResponders) {
			// An ordered consumer replaces its JetStream consumer at every
			// fetch; on a clustered stream the request can reach the
			// servers before the new one listens. The next fetch resumes
			// after the last message delivered.
			if unanswered++; unanswered > noResponderRetries {
				return fmt.Errorf("read stream %q: %d fetches in a row: %w", name, unanswered, err)
			}
			if err := sleep(ctx, time.Duration(unanswered)*20*time.Millisecond); err != nil {
				return fmt.Errorf("read stream %q: %w", name, err)
			}
			continue
		}
		unanswered = 0
		if err != nil {
			return fmt.Errorf("read stream %q: %w", name, err)
		}
		if n == 0 {
			ci, err := cons.Info(ctx)
			if err != nil {
				return fmt.Errorf("read stream %q: %w", name, err)
			}
			if ci.NumPending == 0 {
				return nil // the rest is on other subjects
			}
		}
	}
}

// Tail says what ReadTail reads.
type Tail struct {
	// Stream holds the events, on the template's filter Subject.
	Stream  natsjs.Stream
	Subject string
	// DeadLetters is the stream that holds DeadLetterSubject when that is
	// not Stream (see DeadLetterStream); nil when Stream holds it, or when
	// no stream does.
	DeadLetters       natsjs.Stream
	DeadLetterSubject string
	// From is the slot's confirmed position: the replay starts there.
	From pglogrepl.LSN
	// Source is the relay's. Only messages of its table from its Postgres
	// system (Source.SameTable: whatever slot decoded them, as the same
	// WAL gives the same event the same position and id) are read back:
	// another table's, another cluster's, or an older relay's without the
	// Outbox-Source-* headers are never taken for this one's, whatever
	// their position.
	Source sink.Source
}

// ReadTail calls fn, in stream order (the events' stream, then the
// dead-letter stream when it is another), for every message of the
// relay's table stored from where the tail starts with a commit LSN at or
// after t.From, or with none (0/0: published from the table, by a slot's
// take-up, a polling relay or by hand): the events a slot confirmed at
// From will replay that the streams already hold, whichever slot of the
// table published them.
//
// It finds where each stream's tail starts with a bounded number of
// lookups (an exponential, then a binary search from the end; see
// tailStart), so its cost follows the tail's length, not the stream's,
// also when the stream holds long runs of rows published from a slot's
// snapshot (commit LSN 0) or of messages from other relays.
func ReadTail(ctx context.Context, t Tail, fn func(sink.StoredEvent)) error {
	if t.Source.Origin == 0 {
		return nil // without the slot's creation point, no message can be known to be its
	}
	subjects := []string{t.Subject, t.DeadLetterSubject}
	if t.DeadLetters != nil {
		subjects = subjects[:1]
	}
	if err := readTailOf(ctx, t.Stream, subjects, t.Subject, t.From, t.Source, fn); err != nil {
		return err
	}
	if t.DeadLetters == nil {
		return nil
	}
	return readTailOf(ctx, t.DeadLetters, []string{t.DeadLetterSubject}, t.DeadLetterSubject, t.From, t.Source, fn)
}

// DeadLetterStream returns the stream that holds the dead-letter subject
// when it is not events, or nil when events holds it or no stream does
// (then no dead letter can have been stored since).
func DeadLetterStream(ctx context.Context, js natsjs.JetStream, events natsjs.Stream, subject string) (natsjs.Stream, error) {
	if coveredBy(events.CachedInfo().Config.Subjects, subject) {
		return nil, nil
	}
	name, err := js.StreamNameBySubject(ctx, subject)
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up the stream of the dead-letter subject %q: %w", subject, err)
	}
	stream, err := js.Stream(ctx, name)
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		return nil, nil // deleted meanwhile
	}
	if err != nil {
		return nil, fmt.Errorf("open dead-letter stream %q: %w", name, err)
	}
	return stream, nil
}

// readTailOf is ReadTail for one stream: the tail is searched for on
// searchSubject and read on those of subjects the stream holds.
func readTailOf(ctx context.Context, stream natsjs.Stream, subjects []string, searchSubject string, from pglogrepl.LSN, src sink.Source, fn func(sink.StoredEvent)) error {
	info, err := stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("read stream info: %w", err)
	}
	if info.State.Msgs == 0 {
		return nil
	}
	held := subjects[:0:0]
	for _, s := range subjects {
		if coveredBy(info.Config.Subjects, s) {
			held = append(held, s)
		}
	}
	if len(held) == 0 {
		return nil
	}
	search := &tailSearch{stream: stream, name: info.Config.Name, subject: searchSubject, from: from, src: src, last: info.State.LastSeq}
	start, err := search.start(ctx, info.State.FirstSeq)
	if err != nil {
		return err
	}
	return readRange(ctx, stream, info.Config.Name, held, Read{From: start, HeadersOnly: true}, info.State.LastSeq, func(m *natsjs.RawStreamMsg) bool {
		if ev, ok := ParseStored(m); ok && (ev.Position.CommitLSN >= from || ev.Position.CommitLSN == 0) && src.SameTable(ev.Source) {
			fn(ev)
		}
		return true
	})
}

// tailSearch finds where, in one stream, the relay's messages reach the
// position from.
//
// The relay's messages are stored in commit order, and the rows it
// publishes from a slot's snapshot (commit LSN 0) come before everything
// streamed from that slot, so "before from" holds for a prefix of them. A
// message places the tail when it is the relay's by its source, any
// incarnation of its slot (or carries no source: published by an older
// relay, normally this one): by its commit LSN, LSN 0 counting as before.
// A message another slot streamed from the same table places it by its
// commit LSN too (the same WAL, one slot streaming after the other). Other
// relays' messages, rows another slot published from its snapshot, and
// one-shot messages (verify --republish, dlq retry: LSN 0 stored after
// later commits) have no place in this order and are passed over.
// Should a message mislead the search, the tail only starts early (more is
// read) or late (events are published again): nothing is ever skipped on
// the search's word, since ReadTail's caller compares ids.
type tailSearch struct {
	stream  natsjs.Stream
	name    string
	subject string
	from    pglogrepl.LSN
	src     sink.Source
	last    uint64
}

// places reports whether m places the tail and, if so, whether it comes
// before from.
func (s *tailSearch) places(m *natsjs.RawStreamMsg) (before, ok bool) {
	ev, ok := ParseStored(m)
	switch {
	case !ok || ev.OneShot():
		return false, false
	case sink.OwnedBy(ev, s.src):
	case ev.Position.CommitLSN != 0 && s.src.SameTable(ev.Source):
	default:
		return false, false
	}
	return ev.Position.CommitLSN < s.from, true
}

// before reports whether the first message at or after seq that places
// the tail comes before from. It costs one lookup, and one batch read when
// that message belongs to another relay; when the batch holds no message
// that places the tail, it answers false, which can only make the tail
// start earlier.
func (s *tailSearch) before(ctx context.Context, seq uint64) (bool, error) {
	m, err := s.stream.GetMsg(ctx, seq, natsjs.WithGetMsgSubject(s.subject))
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the stream's tail: %w", err)
	}
	if before, ok := s.places(m); ok {
		return before, nil
	}
	if m.Sequence >= s.last {
		return false, nil
	}
	var before, placed bool
	err = readRange(ctx, s.stream, s.name, []string{s.subject}, Read{From: m.Sequence + 1, HeadersOnly: true, brief: true}, min(s.last, m.Sequence+fetchBatch),
		func(m *natsjs.RawStreamMsg) bool {
			before, placed = s.places(m)
			return !placed
		})
	if err != nil {
		return false, fmt.Errorf("read the stream's tail: %w", err)
	}
	return placed && before, nil
}

// start returns a sequence from which on every message of the relay has a
// commit LSN at or after from, with none before it (last+1 when there is
// none), in O(log n) calls to before: doubling steps back from the end,
// then a binary search.
func (s *tailSearch) start(ctx context.Context, first uint64) (uint64, error) {
	last := s.last
	if ok, err := s.before(ctx, last); err != nil || ok {
		return last + 1, err
	}
	// Walk back in doubling steps to a sequence before from.
	hi := last // before(hi) is false
	var lo uint64
	for step := uint64(1); ; step *= 2 {
		if last < first+step {
			ok, err := s.before(ctx, first)
			if err != nil || !ok {
				return first, err
			}
			lo = first
			break
		}
		ok, err := s.before(ctx, last-step)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = last - step
			break
		}
		hi = last - step
	}
	// before(lo) holds, before(hi) does not: find where it changes.
	for lo+1 < hi {
		mid := lo + (hi-lo)/2
		ok, err := s.before(ctx, mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi, nil
}
