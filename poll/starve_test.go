package poll

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// TestPollBlockedAggregatesDoNotStarveOthers: the oldest ready rows (more
// than four batches of them) all belong to an aggregate whose first row
// waits to be retried: its other rows must wait behind it. The other
// aggregates, with newer rows, flow meanwhile, and the relay does not
// spin over the blocked rows: once the others are published it polls at
// its interval. Before the fix the blocked rows filled every poll's scan:
// the other aggregates waited for the retry, and the loop ran batches back
// to back until then.
func TestPollBlockedAggregatesDoNotStarveOthers(t *testing.T) {
	env := pollEnv(t)
	ctx := context.Background()
	if _, err := env.JS.CreateStream(ctx, jetstream.StreamConfig{Name: env.Stream, Subjects: []string{"outbox.>", env.DeadSubj},
		Storage: jetstream.FileStorage, MaxMsgSize: 2048, Duplicates: time.Second}); err != nil {
		t.Fatal(err)
	}
	cfg := config(t, env)
	cfg.Batch, cfg.MaxAttempts, cfg.Backoff, cfg.MaxBackoff, cfg.Interval = 2, 3, time.Minute, time.Minute, 200*time.Millisecond
	blocked := []relaytest.Row{relaytest.NewRow("order", "1", "too.big", fmt.Sprintf(`{"pad": %q}`, strings.Repeat("x", 4096)))}
	for i := 0; i < 4*cfg.Batch+2; i++ {
		blocked = append(blocked, relaytest.NewRow("order", "1", "next", `{}`))
	}
	env.Tx(blocked...)
	others := env.Tx(relaytest.NewRow("order", "2", "created", `{}`), relaytest.NewRow("order", "3", "created", `{}`))
	r := start(t, env, cfg)

	for deadline := time.Now().Add(20 * time.Second); pending(t, env) > len(blocked); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s, %d rows pending, want only the %d of the aggregate waiting its minute; %v polls so far",
				pending(t, env), len(blocked), r.metric(t, "outbox_relay_poll_batches_total"))
		}
	}
	stored := storedMsgs(t, env)
	if len(stored) != len(others) {
		t.Fatalf("the stream holds %d messages, want the %d of the other aggregates", len(stored), len(others))
	}
	// Nothing is ready now: the relay polls at its interval.
	const window = 2 * time.Second
	before := r.metric(t, "outbox_relay_poll_batches_total")
	time.Sleep(window) // not synchronisation: the span polls are counted over
	polls := r.metric(t, "outbox_relay_poll_batches_total") - before
	if most := float64(window/cfg.Interval) + 2; polls > most {
		t.Errorf("%v polls in %s with nothing ready, want at most %v (one per %s interval)", polls, window, most, cfg.Interval)
	}
	t.Logf("%v polls in %s with the blocked aggregate's rows waiting", polls, window)
}
