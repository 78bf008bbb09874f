package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/sink"
)

// StreamStoring returns the name of the stream that stores messages on
// subject (a filter may hold wildcards: the stream whose subjects overlap
// it), "" when none does. JetStream lets no two streams of an account
// overlap, so a subject names its stream.
func StreamStoring(ctx context.Context, nc *nats.Conn, subject string) (string, error) {
	js, err := natsjs.New(nc)
	if err != nil {
		return "", fmt.Errorf("open JetStream: %w", err)
	}
	name, err := js.StreamNameBySubject(ctx, subject)
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("find the stream storing %q: %w", subject, err)
	}
	return name, nil
}

// Subjects returns the stream's subjects, as of Open.
func (s *Stream) Subjects() []string { return s.stream.CachedInfo().Config.Subjects }

// LastCopy returns the newest copy the replay run runID stored in the
// stream on the template's filter (sink.StoredEvent.Copy), or nil: where
// an interrupted run stopped, since the publisher stores its messages in
// the order offered.
func (s *Stream) LastCopy(ctx context.Context, runID string) (*sink.StoredEvent, error) {
	prefix := contract.ReplayMsgID(runID, "")
	return LastEventOf(ctx, s.stream, func(ev sink.StoredEvent) bool {
		return ev.Copy() && strings.HasPrefix(ev.ID, prefix)
	}, s.spec.Template.Filter())
}
