package relay

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/retry"
	"github.com/outbox-relay/outbox-relay/sink/jetstream"
)

// untilAnswered runs read until JetStream answers it: while it fails for
// want of an answer (jetstream.Unanswered: a node that restarted and is
// catching up answers "JetStream system temporarily unavailable", a stream
// electing its leader answers nothing), it waits and asks again, as the
// stream's creation does, rather than failing the start.
func untilAnswered[T any](ctx context.Context, log zerolog.Logger, stream string, read func(context.Context) (T, error)) (T, error) {
	bo := retry.NewBackoff(200*time.Millisecond, 5*time.Second)
	logs := retry.NewLogLimiter()
	for {
		v, err := read(ctx)
		if err == nil || !jetstream.Unanswered(err) || ctx.Err() != nil {
			return v, err
		}
		if logs.Allow() {
			log.Warn().Err(err).Str("stream", stream).Msg("JetStream not answering yet; retrying")
		}
		t := time.NewTimer(bo.Next())
		select {
		case <-ctx.Done():
			t.Stop()
			var zero T
			return zero, ctx.Err()
		case <-t.C:
		}
	}
}
