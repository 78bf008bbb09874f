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

// LastEvent returns the newest message the relay whose source is src
// published on any of the subjects (filters may use wildcards), or nil
// when there is none. Messages without the relay's headers are not the
// relay's and are ignored, and so are messages stamped by another relay
// (sink.OwnedBy; with a zero src, every relay's messages count). Finding
// the relay's newest message behind others reads back through them, in
// batches.
func LastEvent(ctx context.Context, stream natsjs.Stream, src sink.Source, subjects ...string) (*sink.StoredEvent, error) {
	return LastEventOf(ctx, stream, func(ev sink.StoredEvent) bool { return sink.OwnedBy(ev, src) }, subjects...)
}

// LastEventOf returns the newest message on any of the subjects that
// carries the relay's headers and that keep accepts (status: the newest
// message of the table, sink.OfTable), or nil when there is none.
func LastEventOf(ctx context.Context, stream natsjs.Stream, keep func(sink.StoredEvent) bool, subjects ...string) (*sink.StoredEvent, error) {
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
		if !ok || !keep(ev) {
			found, err := lastBefore(ctx, stream, subj, msg.Sequence, keep)
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
// that keep accepts, or nil: it reads back in windows that double in size.
func lastBefore(ctx context.Context, stream natsjs.Stream, subject string, end uint64, keep func(sink.StoredEvent) bool) (*sink.StoredEvent, error) {
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
			if ev, ok := ParseStored(m); ok && keep(ev) {
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
// be read: then only the event's Seq, Time, Subject, ID and CreatedAt are
// set.
func ParseStored(msg *natsjs.RawStreamMsg) (ev sink.StoredEvent, ok bool) {
	ev = sink.StoredEvent{
		Seq:           msg.Sequence,
		Time:          msg.Time,
		Subject:       msg.Subject,
		ID:            msg.Header.Get(contract.HeaderMsgID),
		AggregateType: msg.Header.Get(contract.HeaderAggregateType),
		AggregateID:   msg.Header.Get(contract.HeaderAggregateID),
		CreatedAt:     msg.Header.Get(contract.HeaderCreatedAt),
		Table:         msg.Header.Get(contract.HeaderTable),
		Replay:        msg.Header.Get(contract.HeaderReplay),
	}
	pos, ok := parsePosition(msg)
	if !ok {
		return ev, false
	}
	if ev.Source, ok = parseSource(msg); !ok {
		return ev, false
	}
	ev.Position = pos
	if rest, ok := strings.CutPrefix(ev.ID, contract.DeadLetterMsgIDPrefix); ok {
		ev.ID, ev.DeadLetter = rest, true
		ev.Reason = msg.Header.Get(contract.HeaderDeadLetterReason)
		ev.RowID = headerValue(msg.Header, contract.HeaderEventID)
	}
	return ev, true
}

// parsePosition reads Outbox-Commit-Lsn and Outbox-Txn-Index.
func parsePosition(msg *natsjs.RawStreamMsg) (decode.Position, bool) {
	lsnText := msg.Header.Get(contract.HeaderCommitLSN)
	idx := msg.Header.Get(contract.HeaderTxnIndex)
	if lsnText == "" || idx == "" {
		return decode.Position{}, false
	}
	lsn, err := pglogrepl.ParseLSN(lsnText)
	if err != nil {
		return decode.Position{}, false
	}
	i, err := strconv.ParseUint(idx, 10, 32)
	if err != nil {
		return decode.Position{}, false
	}
	return decode.Position{CommitLSN: lsn, Index: uint32(i)}, true
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
	if src.Database, ok = decodeName(msg.Header.Get(contract.HeaderSourceDatabase)); !ok {
		return sink.Source{}, false
	}
	if src.Table, ok = decodeName(msg.Header.Get(contract.HeaderSourceTable)); !ok {
		return sink.Source{}, false
	}
	return src, true
}
