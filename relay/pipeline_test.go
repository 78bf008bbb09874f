package relay

import (
	"context"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/sink/memory"
)

// Pure tests of the pipeline between the replication stream and a
// destination, on an in-memory one (sink/memory): what is numbered, what
// is skipped, and what becomes safe to confirm. The same rules on real
// Postgres and JetStream are the e2e tests'.

var testSource = sink.Source{System: "7301234567890123456", Timeline: 1, Slot: "outbox_relay", Origin: 0x100}

func newTestPipeline(dest *memory.Sink, from pglogrepl.LSN, held *checkpoint.Holdings) *pipeline {
	return &pipeline{pub: dest, tracker: checkpoint.NewTracker(from), held: held,
		skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "skipped"})}
}

func event(id string, commit pglogrepl.LSN, index uint32) *decode.Event {
	return &decode.Event{ID: id, AggregateType: "order", AggregateID: "1", EventType: "created", Payload: []byte(`{}`),
		Position: decode.Position{CommitLSN: commit, Index: index}}
}

// flushed is what the pipeline hands the confirmation gate: the newest
// position whose events, and every earlier one, the destination holds.
func (p *pipeline) flushedNow() pglogrepl.LSN { return p.tracker.Flushed(p.pub.AckedThrough()) }

// TestPipelineConfirmsOnlyStoredEvents: a transaction's end becomes safe
// to confirm only once the destination stored all its events and all
// before it; a keepalive outside transactions moves the point only past
// what is stored; a full window refuses the next event.
func TestPipelineConfirmsOnlyStoredEvents(t *testing.T) {
	dest := memory.New(3, sink.NewStamp(testSource))
	p := newTestPipeline(dest, 0x100, nil)
	for _, ev := range []*decode.Event{event("a", 0x200, 0), event("b", 0x200, 1)} {
		if !p.Event(ev) {
			t.Fatalf("event %s refused with room in the window", ev.ID)
		}
	}
	p.Commit(0x210)
	if !p.Event(event("c", 0x300, 0)) {
		t.Fatal("event c refused with room in the window")
	}
	p.Commit(0x310)
	if p.Event(event("d", 0x400, 0)) {
		t.Fatal("a fourth event taken into a window of three")
	}
	p.Idle(0x380)

	steps := []struct {
		ack  int
		want pglogrepl.LSN
	}{
		{0, 0x100}, // nothing stored: nothing new to confirm
		{1, 0x100}, // half of the first transaction
		{1, 0x210}, // the first transaction
		{1, 0x380}, // the second, and the keepalive after it
	}
	for i, s := range steps {
		dest.Ack(s.ack)
		if got := p.flushedNow(); got != s.want {
			t.Fatalf("step %d (%d acknowledged in all): confirmable %s, want %s", i, dest.AckedThrough(), got, s.want)
		}
	}
	if got := len(dest.Stored()); got != 3 {
		t.Fatalf("the destination holds %d events, want 3", got)
	}
}

// TestPipelineSkipsWhatTheDestinationHolds: after a restart, the replayed
// events the destination holds from this very slot are skipped, the
// others published, in order, numbered from 1.
func TestPipelineSkipsWhatTheDestinationHolds(t *testing.T) {
	dest := memory.New(10, sink.NewStamp(testSource))
	other := testSource
	other.Origin = 0x50 // an earlier slot of the same name
	dest.Put(sink.StoredEvent{ID: "a", Position: decode.Position{CommitLSN: 0x200}, Source: testSource})
	dest.Put(sink.StoredEvent{ID: "c", Position: decode.Position{CommitLSN: 0x300}, Source: other})
	held, err := checkpoint.ReadHoldings(context.Background(), dest, 0x150)
	if err != nil {
		t.Fatal(err)
	}
	if held.Len() != 1 {
		t.Fatalf("holdings of the slot: %d events, want 1 (the earlier slot's message is not this slot's)", held.Len())
	}
	p := newTestPipeline(dest, 0x150, held)
	for _, ev := range []*decode.Event{event("a", 0x200, 0), event("b", 0x200, 1), event("c", 0x300, 0)} {
		if !p.Event(ev) {
			t.Fatalf("event %s refused", ev.ID)
		}
	}
	p.Commit(0x310)
	if got := dest.Pending(); got != 2 {
		t.Fatalf("%d events handed over, want 2 (b and c; a is held)", got)
	}
	dest.Ack(2)
	stored := dest.Stored()
	if len(stored) != 4 || stored[2].ID != "b" || stored[3].ID != "c" {
		t.Fatalf("stored %+v; want a and c put before, then b and c", stored)
	}
	if got := p.flushedNow(); got != 0x310 {
		t.Fatalf("confirmable %s, want 0/310", got)
	}
}
