package checkpoint

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/sink"
)

// scanReader is a sink.Reader whose Scan yields events made by ev, and
// remembers the bound it was asked for.
type scanReader struct {
	owner sink.Source
	n     int
	ev    func(i int) (sink.StoredEvent, bool)
	since time.Time
}

func (r *scanReader) Last(context.Context) (*sink.StoredEvent, error)                   { return nil, nil }
func (r *scanReader) Tail(context.Context, pglogrepl.LSN, func(sink.StoredEvent)) error { return nil }
func (r *scanReader) Owner() sink.Source                                                { return r.owner }
func (r *scanReader) Horizon(context.Context) (*sink.Horizon, error)                    { return nil, nil }
func (r *scanReader) Scan(_ context.Context, since time.Time, fn func(sink.StoredEvent, bool) bool) error {
	r.since = since
	for i := 0; i < r.n; i++ {
		if !fn(r.ev(i)) {
			return nil
		}
	}
	return nil
}

var tableSource = sink.Source{System: "7301234567890123456", Timeline: 1, Slot: "outbox_relay", Database: "app", Table: "public.outbox_events"}

// TestTableHoldings: a take-up's holdings are the ids of the table's
// messages, whatever slot or relay published them (a renamed slot's, a
// polling relay's, a dead letter, a relay's without source headers), and
// none of another table's, database's or cluster's, nor unreadable ones;
// the stream is read from an hour before the oldest row.
func TestTableHoldings(t *testing.T) {
	renamed, poll := tableSource, tableSource
	renamed.Slot, poll.Slot = "outbox_relay_v2", "poll:public.outbox_events"
	otherTable, otherDB, otherCluster := tableSource, tableSource, tableSource
	otherTable.Table, otherDB.Database, otherCluster.System = "public.outbox2", "billing", "7309999999999999999"
	msgs := []struct {
		ev   sink.StoredEvent
		ok   bool
		held bool
	}{
		{sink.StoredEvent{ID: "mine", Source: tableSource}, true, true},
		{sink.StoredEvent{ID: "renamed", Source: renamed}, true, true},
		{sink.StoredEvent{ID: "polled", Source: poll}, true, true},
		{sink.StoredEvent{ID: "dead", Source: tableSource, DeadLetter: true}, true, true},
		{sink.StoredEvent{ID: "legacy"}, true, true},
		{sink.StoredEvent{ID: "t2", Source: otherTable}, true, false},
		{sink.StoredEvent{ID: "db2", Source: otherDB}, true, false},
		{sink.StoredEvent{ID: "c2", Source: otherCluster}, true, false},
		{sink.StoredEvent{ID: "unreadable", Source: tableSource}, false, false},
		{sink.StoredEvent{ID: "republished", Source: tableSource, Replay: contract.ReplayRepublish}, true, true},
		// replay's copy holds nothing, even under an id a row could have
		{sink.StoredEvent{ID: "copied", Source: tableSource, Replay: contract.ReplayCopy}, true, false},
	}
	r := &scanReader{owner: tableSource, n: len(msgs), ev: func(i int) (sink.StoredEvent, bool) { return msgs[i].ev, msgs[i].ok }}
	oldest := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	h, err := ReadTableHoldings(context.Background(), r, oldest, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if want := oldest.Add(-ClockMargin); !r.since.Equal(want) {
		t.Errorf("read from %s, want %s", r.since, want)
	}
	if h.Read() != len(msgs) || h.Len() != 6 {
		t.Errorf("read %d, held %d; want %d and 6", h.Read(), h.Len(), len(msgs))
	}
	for _, m := range msgs {
		if got := h.Holds(&decode.Event{ID: m.ev.ID}); got != m.held {
			t.Errorf("%s: held %v, want %v", m.ev.ID, got, m.held)
		}
	}
	if h.Holds(&decode.Event{ID: "never-published"}) {
		t.Error("an id the stream does not hold is held")
	}
}

// TestTableHoldingsMemory: 36-byte ids, what a take-up keeps of a stream
// holding 250,000 of the table's events, cost about 44 bytes each
// (logged), not the 90 or so of a map of strings; all are found.
func TestTableHoldingsMemory(t *testing.T) {
	const n = 250_000
	id := func(i int) string { return fmt.Sprintf("%08d-0000-4000-8000-000000000000", i) }
	r := &scanReader{owner: tableSource, n: n, ev: func(i int) (sink.StoredEvent, bool) {
		return sink.StoredEvent{ID: id((i * 7919) % n), Source: tableSource}, true // not in id order
	}}
	before := heapAlloc()
	h, err := ReadTableHoldings(context.Background(), r, time.Time{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	perID := float64(heapAlloc()-before) / n
	for _, i := range []int{0, 1, n / 2, n - 1} {
		if !h.Holds(&decode.Event{ID: id(i)}) {
			t.Fatalf("id %s not found", id(i))
		}
	}
	if h.Holds(&decode.Event{ID: id(n)}) {
		t.Fatal("an id never read is held")
	}
	if perID > 64 {
		t.Errorf("%.0f bytes of heap an id, want the id's 36 and a few more", perID)
	}
	t.Logf("%d ids held in %.1f MiB: %.0f bytes each", n, perID*n/(1<<20), perID)
	runtime.KeepAlive(h)
}

func heapAlloc() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
