package jetstream

import (
	"context"
	"time"

	"github.com/jackc/pglogrepl"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/retry"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Reader reads back what a stream holds of one relay's events: the
// sink.Reader of the JetStream destination.
type Reader struct {
	js     natsjs.JetStream
	stream natsjs.Stream
	events string // the template's filter
	dead   string // the dead-letter subject
	stamp  *sink.Stamp
}

var _ sink.Reader = (*Reader)(nil)

// Owner returns the source read back as the relay's (zero with no stamp).
func (r *Reader) Owner() sink.Source { return r.stamp.Source() }

// Last returns the newest event the relay published, on the events'
// subjects or the dead-letter subject (see LastEvent). While JetStream
// cannot answer for now (a cluster electing its leaders after its servers
// returned), it asks again, for up to two minutes: the relay's take-up
// reads it once, and would otherwise end.
func (r *Reader) Last(ctx context.Context) (last *sink.StoredEvent, err error) {
	bo := retry.NewBackoff(200*time.Millisecond, 5*time.Second)
	deadline := time.Now().Add(reconcileBudget)
	for {
		last, err = LastEvent(ctx, r.stream, r.Owner(), r.events, r.dead)
		if err == nil || !unanswered(err) || time.Now().After(deadline) {
			return last, err
		}
		if serr := sleep(ctx, bo.Next()); serr != nil {
			return nil, err
		}
	}
}

// Tail calls fn for the events of the relay's table stored with a
// commit position at or after from: in the events' stream, then in the
// dead-letter subject's stream when that is another (see ReadTail).
func (r *Reader) Tail(ctx context.Context, from pglogrepl.LSN, fn func(sink.StoredEvent)) error {
	dead, err := DeadLetterStream(ctx, r.js, r.stream, r.dead)
	if err != nil {
		return err
	}
	return ReadTail(ctx, Tail{
		Stream: r.stream, Subject: r.events,
		DeadLetters: dead, DeadLetterSubject: r.dead,
		From: from, Source: r.Owner(),
	}, fn)
}

// Scan calls fn for every message on the relay's subjects stored at or
// after since, in stream order, with its headers read (ParseStored).
func (r *Reader) Scan(ctx context.Context, since time.Time, fn func(ev sink.StoredEvent, ok bool) bool) error {
	return ForEach(ctx, r.stream, []string{r.events, r.dead}, Read{Since: since, HeadersOnly: true}, func(m *natsjs.RawStreamMsg) bool {
		return fn(ParseStored(m))
	})
}

// NewReader returns a Reader of stream for the relay whose messages carry
// stamp's source (every relay's messages count with a nil stamp), on the
// events' subject filter and the dead-letter subject; js finds the
// dead-letter subject's stream when stream does not hold it.
func NewReader(js natsjs.JetStream, stream natsjs.Stream, events, deadLetters string, stamp *sink.Stamp) *Reader {
	return &Reader{js: js, stream: stream, events: events, dead: deadLetters, stamp: stamp}
}

// Messages calls fn for every message on subjects stored in the stream up
// to its last sequence at the time of the call, in stream order.
func Messages(ctx context.Context, stream natsjs.Stream, subjects []string, fn func(*natsjs.RawStreamMsg)) error {
	return ForEach(ctx, stream, subjects, Read{}, func(m *natsjs.RawStreamMsg) bool {
		fn(m)
		return true
	})
}
