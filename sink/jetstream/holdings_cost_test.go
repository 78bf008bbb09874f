package jetstream

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/sink"
)

var holdingsMessages = flag.Int("holdings.messages", 100_000, "messages in the stream TestReadTableHoldingsCost reads (docs/guarantees.md quotes a run with 1000000)")

// TestReadTableHoldingsCost: a take-up reads which of its table's events
// the stream holds with one headers-only pass. On a stream of
// -holdings.messages messages, half of them another table's (a stream
// shared by two relays), it keeps exactly its table's ids, none of the
// other's, and logs what the read cost: time and messages a second.
func TestReadTableHoldingsCost(t *testing.T) {
	n := *holdingsMessages
	e := newTestEnv(t, natsjs.StreamConfig{})
	other := relayB
	other.Slot, other.Table = "outbox2_relay", "public.outbox2"
	fill(t, e, n, func(i int) *nats.Msg {
		src := relayB
		if i%2 == 1 {
			src = other
		}
		return crafted{id: fmt.Sprintf("%08d-0000-4000-8000-000000000000", i), at: at(0, uint32(i)), src: src}.msg()
	})
	reader := NewReader(e.js, e.stream, "outbox.>", testDeadLetter, sink.NewStamp(relayB))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	began := time.Now()
	held, err := checkpoint.ReadTableHoldings(ctx, reader, time.Time{}, zerolog.Nop())
	took := time.Since(began)
	if err != nil {
		t.Fatal(err)
	}
	if held.Read() != n || held.Len() != (n+1)/2 {
		t.Fatalf("read %d messages, kept %d ids; want %d and %d (the table's half)", held.Read(), held.Len(), n, (n+1)/2)
	}
	for _, c := range []struct {
		i    int
		want bool
	}{{0, true}, {1, false}, {n - 1, (n-1)%2 == 0}} {
		ev := &decode.Event{ID: fmt.Sprintf("%08d-0000-4000-8000-000000000000", c.i)}
		if got := held.Holds(ev); got != c.want {
			t.Errorf("message %d: held %v, want %v", c.i, got, c.want)
		}
	}
	t.Logf("%d messages read headers-only in %s (%.0f messages/s); %d ids kept (their memory: checkpoint's TestTableHoldingsMemory)",
		n, took.Round(time.Millisecond), float64(n)/took.Seconds(), held.Len())
}
