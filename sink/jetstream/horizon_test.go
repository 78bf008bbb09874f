package jetstream

import (
	"context"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// TestHorizon: once a stream's own limits removed messages, the Reader's
// horizon is the oldest event it still holds; a stream without limits
// that remove messages, or that removed none yet, has none.
func TestHorizon(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     natsjs.StreamConfig
		publish int
		oldest  int // the event the horizon names, 0 for no horizon
	}{
		{"no limits", natsjs.StreamConfig{}, 8, 0},
		{"limit not reached", natsjs.StreamConfig{MaxMsgs: 10, Discard: natsjs.DiscardOld}, 8, 0},
		{"discard new refuses instead", natsjs.StreamConfig{MaxMsgs: 5, Discard: natsjs.DiscardNew}, 5, 0},
		{"count limit removed three", natsjs.StreamConfig{MaxMsgs: 5, Discard: natsjs.DiscardOld}, 8, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestEnv(t, tc.cfg)
			p := env.publisher(t, Config{Stream: env.stream})
			run(t, p)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for i := 1; i <= tc.publish; i++ {
				ev := event(i, nil)
				ev.CreatedAt = time.Date(2024, 5, 1, 10, 0, i, 0, time.UTC).Format(time.RFC3339Nano)
				if _, err := p.Publish(ctx, ev); err != nil {
					t.Fatal(err)
				}
			}
			drain(t, p, 10*time.Second)
			h, err := NewReader(env.js, env.stream, "outbox.>", testDeadLetter, nil).Horizon(ctx)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.oldest == 0 && h != nil:
				t.Fatalf("horizon %+v, want none", h)
			case tc.oldest == 0:
				return
			case h == nil || h.Oldest == nil:
				t.Fatalf("horizon %+v, want event %d", h, tc.oldest)
			}
			want := event(tc.oldest, nil).ID
			before := time.Date(2024, 5, 1, 10, 0, tc.oldest, 0, time.UTC)
			if h.Oldest.ID != want || !h.Before.Equal(before) || !strings.Contains(h.Limits, "max messages 5") {
				t.Errorf("horizon: oldest %s before %s limits %q, want %s before %s with max messages 5", h.Oldest.ID, h.Before, h.Limits, want, before)
			}
		})
	}
}
