package relay

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// TestUntilAnswered: a start-up read of the stream waits while JetStream
// does not answer (a node catching up after a restart answers 503, "JetStream
// system temporarily unavailable"), and fails at once on any other error.
func TestUntilAnswered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	unavailable := &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
	calls := 0
	got, err := untilAnswered(ctx, zerolog.Nop(), "S", func(context.Context) (int, error) {
		if calls++; calls <= 2 {
			return 0, unavailable
		}
		return 7, nil
	})
	if err != nil || got != 7 || calls != 3 {
		t.Errorf("after two unanswered reads: %d, %v after %d calls; want 7 after 3", got, err, calls)
	}

	refused := errors.New("nats: permissions violation")
	calls = 0
	if _, err := untilAnswered(ctx, zerolog.Nop(), "S", func(context.Context) (int, error) {
		calls++
		return 0, refused
	}); !errors.Is(err, refused) || calls != 1 {
		t.Errorf("a refusal: %v after %d calls; want it at once", err, calls)
	}

	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	defer stop()
	if _, err := untilAnswered(short, zerolog.Nop(), "S", func(context.Context) (int, error) {
		return 0, unavailable
	}); err == nil {
		t.Error("a read never answered returned no error when its context ended")
	}
}
