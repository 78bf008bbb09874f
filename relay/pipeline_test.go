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
// events the destination holds of this table are skipped, whichever slot
// stored them (by position and id; rows published from the table, by id),
// the others published, in order, numbered from 1: another cluster's
// message at an event's position, or another table's with its id, does
// not hold it.
func TestPipelineSkipsWhatTheDestinationHolds(t *testing.T) {
	mine := testSource
	mine.Database, mine.Table = "app", "public.outbox_events"
	dest := memory.New(10, sink.NewStamp(mine))
	earlier := mine
	earlier.Origin = 0x50 // an earlier slot of the same name
	renamed := mine
	renamed.Slot, renamed.Origin = "outbox_relay_v2", 0x390 // another slot of the table
	otherCluster := mine
	otherCluster.System = "7309999999999999999"
	otherTable := mine
	otherTable.Slot, otherTable.Table = "outbox2", "public.outbox2"
	for _, ev := range []sink.StoredEvent{
		{ID: "a", Position: decode.Position{CommitLSN: 0x200}, Source: mine},
		{ID: "c", Position: decode.Position{CommitLSN: 0x300}, Source: earlier},
		{ID: "x", Position: decode.Position{CommitLSN: 0x300, Index: 1}, Source: otherCluster},
		{ID: "e", Position: decode.Position{}, Source: renamed},
		{ID: "f", Position: decode.Position{Index: 1}, Source: otherTable},
	} {
		dest.Put(ev)
	}
	held, err := checkpoint.ReadHoldings(context.Background(), dest, 0x150)
	if err != nil {
		t.Fatal(err)
	}
	if held.Len() != 3 {
		t.Fatalf("holdings of the table: %d events, want 3 (a, c and e)", held.Len())
	}
	p := newTestPipeline(dest, 0x150, held)
	for _, ev := range []*decode.Event{event("a", 0x200, 0), event("b", 0x200, 1), event("c", 0x300, 0), event("d", 0x300, 1),
		event("e", 0x400, 0), event("f", 0x400, 1)} {
		if !p.Event(ev) {
			t.Fatalf("event %s refused", ev.ID)
		}
	}
	p.Commit(0x410)
	if got := dest.Pending(); got != 3 {
		t.Fatalf("%d events handed over, want 3 (b, d and f; a, c and e are held)", got)
	}
	dest.Ack(3)
	stored := dest.Stored()
	if len(stored) != 8 || stored[5].ID != "b" || stored[6].ID != "d" || stored[7].ID != "f" {
		t.Fatalf("stored %+v; want a, c, x, e, f put before, then b, d and f", stored)
	}
	if got := p.flushedNow(); got != 0x410 {
		t.Fatalf("confirmable %s, want 0/410", got)
	}
}
