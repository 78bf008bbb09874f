package sink

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
)

// StoredEvent is a message the relay published, as the stream holds it.
type StoredEvent struct {
	Seq        uint64
	Time       time.Time
	Subject    string
	ID         string
	Position   decode.Position
	DeadLetter bool
	// Reason is why a dead letter was sent there.
	Reason string
	// Source is where the message says it comes from; zero for a message
	// published by a relay older than the Outbox-Source-* headers.
	Source Source
}

// SameRelay reports whether a message stamped with m was published by the
// relay s describes: the same cluster and slot name, whatever the slot's
// incarnation or the timeline. A zero s matches nothing.
func (s Source) SameRelay(m Source) bool {
	return !s.IsZero() && s.System == m.System && s.Slot == m.Slot
}

// SameSlot reports whether a message stamped with m was decoded from the
// very slot s describes: the same relay and the same creation point, known
// on both sides. Only such messages can tell which events of a replay the
// stream holds; the timeline does not matter, as the event's id is
// compared too.
func (s Source) SameSlot(m Source) bool {
	return s.SameRelay(m) && s.Origin != 0 && s.Origin == m.Origin
}

// sourcedStream is a stream as one relay reads it back.
type sourcedStream struct {
	jetstream.Stream
	stamp *Stamp
}

// WithSource returns stream as read by the relay whose messages carry
// stamp's source: LastEvent (and verify, unless told otherwise) then count
// only that relay's messages, and those of relays older than the
// Outbox-Source-* headers, which may be its own.
func WithSource(stream jetstream.Stream, stamp *Stamp) jetstream.Stream {
	return &sourcedStream{Stream: stream, stamp: stamp}
}

// SourceOf returns the source WithSource attached to stream; ok is false
// when there is none.
func SourceOf(stream jetstream.Stream) (src Source, ok bool) {
	s, ok := stream.(*sourcedStream)
	if !ok {
		return Source{}, false
	}
	src = s.stamp.Source()
	return src, !src.IsZero()
}

// OwnedBy reports whether a stored message may be the relay's whose
// source is src, for counting what the relay published: stamped with
// src's cluster and slot, or not stamped at all (published by an older
// relay, which may be this one). A zero src owns every relay message.
func OwnedBy(ev StoredEvent, src Source) bool {
	return src.IsZero() || ev.Source.IsZero() || src.SameRelay(ev.Source)
}

// LastEvent returns the newest message the relay published on any of the
// subjects (filters may use wildcards), or nil when there is none.
// Messages without the relay's headers are not the relay's and are
// ignored; on a stream from WithSource, so are messages stamped by another
// relay (OwnedBy). Finding the relay's newest message behind others reads
// back through them, in batches.
func LastEvent(ctx context.Context, stream jetstream.Stream, subjects ...string) (*StoredEvent, error) {
	src, _ := SourceOf(stream)
	var last *StoredEvent
	for _, subj := range subjects {
		msg, err := stream.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read the last message on %q: %w", subj, err)
		}
		ev, ok := ParseStored(msg)
		if !ok || !OwnedBy(ev, src) {
			found, err := lastBefore(ctx, stream, subj, msg.Sequence, src)
			if err != nil {
				return nil, fmt.Errorf("read the relay's last message on %q: %w", subj, err)
			}
			if found == nil {
				continue
			}
			ev = *found
		}
		if last == nil || ev.Seq > last.Seq {
			last = &ev
		}
	}
	return last, nil
}

// lastBefore returns the newest message before sequence end on subject
// that src owns, or nil: it reads back in windows that double in size.
func lastBefore(ctx context.Context, stream jetstream.Stream, subject string, end uint64, src Source) (*StoredEvent, error) {
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("read stream info: %w", err)
	}
	first := info.State.FirstSeq
	window := uint64(fetchBatch)
	for end > first {
		from := first
		if end-first > window {
			from = end - window
		}
		var found *StoredEvent
		err := readRange(ctx, stream, info.Config.Name, []string{subject}, Read{From: from, HeadersOnly: true, brief: true}, end-1, func(m *jetstream.RawStreamMsg) bool {
			if ev, ok := ParseStored(m); ok && OwnedBy(ev, src) {
				found = &ev
			}
			return true
		})
		if err != nil || found != nil {
			return found, err
		}
		end = from
		window = min(2*window, 64*fetchBatch)
	}
	return nil, nil
}

// ParseStored reads the relay's headers of a stored message; ok is false
// when the message does not carry them, or carries a source that cannot
// be read.
func ParseStored(msg *jetstream.RawStreamMsg) (StoredEvent, bool) {
	lsnText := msg.Header.Get(contract.HeaderCommitLSN)
	idx := msg.Header.Get(contract.HeaderTxnIndex)
	if lsnText == "" || idx == "" {
		return StoredEvent{}, false
	}
	lsn, err := pglogrepl.ParseLSN(lsnText)
	if err != nil {
		return StoredEvent{}, false
	}
	i, err := strconv.ParseUint(idx, 10, 32)
	if err != nil {
		return StoredEvent{}, false
	}
	src, ok := parseSource(msg)
	if !ok {
		return StoredEvent{}, false
	}
	ev := StoredEvent{
		Seq:      msg.Sequence,
		Time:     msg.Time,
		Subject:  msg.Subject,
		ID:       msg.Header.Get(contract.HeaderMsgID),
		Position: decode.Position{CommitLSN: lsn, Index: uint32(i)},
		Source:   src,
	}
	if rest, ok := strings.CutPrefix(ev.ID, contract.DeadLetterMsgIDPrefix); ok {
		ev.ID, ev.DeadLetter = rest, true
		ev.Reason = msg.Header.Get(contract.HeaderDeadLetterReason)
	}
	return ev, true
}

// parseSource reads the Outbox-Source-* headers: a zero Source when there
// are none, ok false when they are there but cannot be read.
func parseSource(msg *jetstream.RawStreamMsg) (src Source, ok bool) {
	src.System = msg.Header.Get(contract.HeaderSourceSystem)
	if src.System == "" {
		return Source{}, true
	}
	tl, err := strconv.ParseUint(msg.Header.Get(contract.HeaderSourceTimeline), 10, 32)
	if err != nil {
		return Source{}, false
	}
	src.Timeline = uint32(tl)
	src.Slot = msg.Header.Get(contract.HeaderSourceSlot)
	if origin := msg.Header.Get(contract.HeaderSourceOrigin); origin != "" {
		if src.Origin, err = pglogrepl.ParseLSN(origin); err != nil {
			return Source{}, false
		}
	}
	return src, true
}

// StoredID returns the id under which the stream holds ev, as ParseStored
// reads it back: the event's id, or for a dead letter whose id cannot be
// a Nats-Msg-Id, its WAL position.
func StoredID(ev *decode.Event) string {
	if contract.CheckID(ev.ID) != "" {
		return ev.Position.String()
	}
	return ev.ID
}
