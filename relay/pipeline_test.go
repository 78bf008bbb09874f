package relay

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/replication"
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

// TestTimelineChangeConfirmsNothingBeyondFork: keepalives of timeline 1
// made 0x900 confirmable, past the last event (0x200). The session after
// a promotion finds timeline 2, forked at 0x400: from then on the pipeline
// confirms nothing beyond 0x400 until the new timeline's WAL says so, and
// the gate clears the new timeline's positions against its own WAL, not
// with the old timeline's allowance.
func TestTimelineChangeConfirmsNothingBeyondFork(t *testing.T) {
	dest := memory.New(3, sink.NewStamp(testSource))
	p := newTestPipeline(dest, 0x100, nil)
	src, err := newSourceFrom(pglogrepl.IdentifySystemResult{SystemID: testSource.System, Timeline: 1}, nil, testSource.Slot, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	p.source = src
	var walEnd, checks atomic.Uint64
	walEnd.Store(0x1000)
	check := func(context.Context) (pglogrepl.LSN, error) {
		checks.Add(1)
		return pglogrepl.LSN(walEnd.Load()), nil
	}
	p.gate = checkpoint.NewGate(checkpoint.NewLedger(nil, 0, 1<<40, zerolog.Nop()), check, zerolog.Nop())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = p.gate.Run(ctx) }()

	if !p.Event(event("a", 0x200, 0)) {
		t.Fatal("event a refused")
	}
	p.Commit(0x280)
	p.Idle(0x900)
	dest.Ack(1)
	waitConfirmable(t, p, 0x900)

	// The promoted standby's WAL ends at 0x480, with transactions the
	// relay has not read yet.
	walEnd.Store(0x480)
	start := replication.SessionStart{System: pglogrepl.IdentifySystemResult{SystemID: testSource.System, Timeline: 2},
		TimelineHistory: []byte("1\t0/400\tno recovery target specified\n")}
	if err := p.followTimeline(start); err != nil {
		t.Fatal(err)
	}
	// Until the gate has checked the new timeline twice, and after.
	for after := checks.Load() + 2; ; time.Sleep(time.Millisecond) {
		if got, err := p.Flushed(ctx, false); err != nil || got > 0x400 {
			t.Fatalf("on timeline 2, forked at 0/400, nothing of it read: confirmable %s (%v), want at most 0/400", got, err)
		}
		if checks.Load() >= after {
			break
		}
	}
	// A keepalive of the new timeline beyond where the gate last checked
	// it: cleared only once the publication is checked there, whatever
	// the old timeline's allowance was.
	p.Idle(0x800)
	waitConfirmable(t, p, 0x480)
	walEnd.Store(0x800)
	waitConfirmable(t, p, 0x800)
	if got := src.Source().Timeline; got != 2 {
		t.Errorf("messages stamped with timeline %d, want 2", got)
	}
}

// waitConfirmable waits until the pipeline's confirmable position,
// through the gate, is want, failing if it ever passes it.
func waitConfirmable(t *testing.T, p *pipeline, want pglogrepl.LSN) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		got, err := p.Flushed(context.Background(), false)
		if err != nil || got > want {
			t.Fatalf("confirmable %s (%v), want at most %s", got, err, want)
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("confirmable %s, never %s", got, want)
		}
	}
}
