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
}

// LastEvent returns the newest message the relay published on any of the
// subjects (filters may use wildcards), or nil when there is none.
// Messages without the relay's headers are not the relay's and are
// ignored.
func LastEvent(ctx context.Context, stream jetstream.Stream, subjects ...string) (*StoredEvent, error) {
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
		if ok && (last == nil || ev.Seq > last.Seq) {
			last = &ev
		}
	}
	return last, nil
}

// ParseStored reads the relay's headers of a stored message; ok is false
// when the message does not carry them.
func ParseStored(msg *jetstream.RawStreamMsg) (StoredEvent, bool) {
	lsnText := msg.Header.Get(HeaderCommitLSN)
	idx := msg.Header.Get(HeaderTxnIndex)
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
	ev := StoredEvent{
		Seq:      msg.Sequence,
		Time:     msg.Time,
		Subject:  msg.Subject,
		ID:       msg.Header.Get(HeaderMsgID),
		Position: decode.Position{CommitLSN: lsn, Index: uint32(i)},
	}
	if rest, ok := strings.CutPrefix(ev.ID, DeadLetterMsgIDPrefix); ok {
		ev.ID, ev.DeadLetter = rest, true
	}
	return ev, true
}
