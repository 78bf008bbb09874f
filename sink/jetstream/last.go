package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/sink"
)

// sourcedStream is a stream as one relay reads it back.
type sourcedStream struct {
	natsjs.Stream
	stamp *sink.Stamp
}

// WithSource returns stream as read by the relay whose messages carry
// stamp's source: LastEvent (and verify, unless told otherwise) then count
// only that relay's messages, and those of relays older than the
// Outbox-Source-* headers, which may be its own.
func WithSource(stream natsjs.Stream, stamp *sink.Stamp) natsjs.Stream {
	return &sourcedStream{Stream: stream, stamp: stamp}
}

// SourceOf returns the source WithSource attached to stream; ok is false
// when there is none.
func SourceOf(stream natsjs.Stream) (src sink.Source, ok bool) {
	s, ok := stream.(*sourcedStream)
	if !ok {
		return sink.Source{}, false
	}
	src = s.stamp.Source()
	return src, !src.IsZero()
}

// LastEvent returns the newest message the relay published on any of the
// subjects (filters may use wildcards), or nil when there is none.
// Messages without the relay's headers are not the relay's and are
// ignored; on a stream from WithSource, so are messages stamped by another
// relay (OwnedBy). Finding the relay's newest message behind others reads
// back through them, in batches.
func LastEvent(ctx context.Context, stream natsjs.Stream, subjects ...string) (*sink.StoredEvent, error) {
	src, _ := SourceOf(stream)
	var last *sink.StoredEvent
	for _, subj := range subjects {
		msg, err := stream.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, natsjs.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read the last message on %q: %w", subj, err)
		}
		ev, ok := ParseStored(msg)
		if !ok || !sink.OwnedBy(ev, src) {
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
func lastBefore(ctx context.Context, stream natsjs.Stream, subject string, end uint64, src sink.Source) (*sink.StoredEvent, error) {
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
		var found *sink.StoredEvent
		err := readRange(ctx, stream, info.Config.Name, []string{subject}, Read{From: from, HeadersOnly: true, brief: true}, end-1, func(m *natsjs.RawStreamMsg) bool {
			if ev, ok := ParseStored(m); ok && sink.OwnedBy(ev, src) {
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
func ParseStored(msg *natsjs.RawStreamMsg) (sink.StoredEvent, bool) {
	lsnText := msg.Header.Get(contract.HeaderCommitLSN)
	idx := msg.Header.Get(contract.HeaderTxnIndex)
	if lsnText == "" || idx == "" {
		return sink.StoredEvent{}, false
	}
	lsn, err := pglogrepl.ParseLSN(lsnText)
	if err != nil {
		return sink.StoredEvent{}, false
	}
	i, err := strconv.ParseUint(idx, 10, 32)
	if err != nil {
		return sink.StoredEvent{}, false
	}
	src, ok := parseSource(msg)
	if !ok {
		return sink.StoredEvent{}, false
	}
	ev := sink.StoredEvent{
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
func parseSource(msg *natsjs.RawStreamMsg) (src sink.Source, ok bool) {
	src.System = msg.Header.Get(contract.HeaderSourceSystem)
	if src.System == "" {
		return sink.Source{}, true
	}
	tl, err := strconv.ParseUint(msg.Header.Get(contract.HeaderSourceTimeline), 10, 32)
	if err != nil {
		return sink.Source{}, false
	}
	src.Timeline = uint32(tl)
	src.Slot = msg.Header.Get(contract.HeaderSourceSlot)
	if origin := msg.Header.Get(contract.HeaderSourceOrigin); origin != "" {
		if src.Origin, err = pglogrepl.ParseLSN(origin); err != nil {
			return sink.Source{}, false
		}
	}
	return src, true
}
