package jetstream

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/sink"
)

// TestDeadLettersOfTableEventsNeverCollide: events read from the table
// (commit LSN 0: polling batches, a slot's creation, one-shot runs) whose
// id a Nats-Msg-Id cannot carry, or without an id, share positions: the
// index restarts with every batch and every process. Two batches of one
// publisher and a second publisher (a restart within the duplicate
// window) each dead-letter events at the same positions: every dead letter
// is stored (none dropped as a duplicate), and each is recorded under its
// own key: the row's id, or for a row without one the id its dead letter
// is stored under.
func TestDeadLettersOfTableEventsNeverCollide(t *testing.T) {
	e := newTestEnv(t, natsjs.StreamConfig{Duplicates: time.Minute})
	var mu sync.Mutex
	var keys []string
	record := func(_ context.Context, ev *decode.Event, stored, _ string) error {
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, sink.DeadLetterKey(ev.ID, stored))
		return nil
	}
	tableEvent := func(id string, index uint32) *decode.Event {
		ev := event(1, nil)
		ev.ID, ev.Position = id, decode.Position{Index: index}
		if ev.Problem = contract.CheckID(id); id == "" {
			ev.Problem = "id is NULL"
		}
		return ev
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	publish := func(p *Publisher, evs ...*decode.Event) {
		t.Helper()
		for _, ev := range evs {
			if _, err := p.Publish(ctx, ev); err != nil {
				t.Fatal(err)
			}
		}
		drain(t, p, 10*time.Second)
	}
	first := e.publisher(t, Config{Window: 8, Stream: e.stream, RecordDeadLetter: record})
	run(t, first)
	publish(first, tableEvent("order 1", 0), tableEvent("", 1)) // a batch
	publish(first, tableEvent("order 2", 0), tableEvent("", 1)) // the next batch
	second := e.publisher(t, Config{Window: 8, Stream: e.stream, RecordDeadLetter: record})
	run(t, second)
	publish(second, tableEvent("order 3", 0), tableEvent("", 1)) // another process

	var dead []string
	for _, m := range e.contents(t) {
		if m.subject == testDeadLetter {
			dead = append(dead, m.id)
		}
	}
	if slices.Sort(dead); len(slices.Compact(slices.Clone(dead))) != 6 {
		t.Errorf("the stream holds %d dead letters, %d different: %q; want 6", len(dead), len(slices.Compact(slices.Clone(dead))), dead)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(keys)
	if len(slices.Compact(slices.Clone(keys))) != 6 {
		t.Errorf("dead letters recorded under %q: want 6 different keys", keys)
	}
	for _, id := range []string{"order 1", "order 2", "order 3"} {
		if !slices.Contains(keys, id) {
			t.Errorf("no dead letter recorded under the row's id %q: %q", id, keys)
		}
	}
}
