package checkpoint

import (
	"math/rand"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/decode"
)

func lsn(v uint64) pglogrepl.LSN { return pglogrepl.LSN(v) }

func pos(lsn pglogrepl.LSN, i uint32) decode.Position {
	return decode.Position{CommitLSN: lsn, Index: i}
}

func TestTrackerConfirmsOnlyFullyAckedTransactions(t *testing.T) {
	tr := NewTracker(0x50)
	// Transaction A: two events (seq 1, 2), ends at 0x200.
	tr.Handed(pos(0x100, 0), 1)
	tr.Handed(pos(0x100, 1), 2)
	tr.Commit(0x200)
	// Transaction B: one event (seq 3), ends at 0x300.
	tr.Handed(pos(0x280, 0), 3)
	tr.Commit(0x300)

	steps := []struct {
		acked uint64
		want  pglogrepl.LSN
	}{
		{0, 0x50},  // nothing acked: stay at the slot's position
		{1, 0x50},  // half of A acked: still not
		{2, 0x200}, // all of A
		{2, 0x200},
		{3, 0x300}, // B too
	}
	for _, s := range steps {
		if got := tr.Flushed(s.acked); got != s.want {
			t.Fatalf("Flushed(%d) = %s, want %s", s.acked, got, s.want)
		}
	}
}

func TestTrackerKeepaliveConfirmableOnlyAfterEarlierEvents(t *testing.T) {
	tr := NewTracker(0)
	tr.Handed(pos(0x100, 0), 1)
	tr.Commit(0x180)
	tr.Idle(0x900) // other tables were busy; no outbox events since seq 1
	if got := tr.Flushed(0); got != 0 {
		t.Fatalf("keepalive confirmed before the event before it was acked: %s", got)
	}
	if got := tr.Flushed(1); got != 0x900 {
		t.Fatalf("Flushed(1) = %s, want the keepalive's 0/900", got)
	}
}

func TestTrackerIdleWithNothingInFlight(t *testing.T) {
	tr := NewTracker(0x10)
	for lsn := pglogrepl.LSN(0x100); lsn < 0x10000; lsn += 0x100 {
		tr.Idle(lsn)
	}
	if tr.Pending() != 1 {
		t.Fatalf("keepalives with nothing in flight queued %d marks, want them merged into 1", tr.Pending())
	}
	if got := tr.Flushed(0); got != 0xff00 {
		t.Fatalf("Flushed = %s", got)
	}
}

func TestTrackerNeverMovesBackward(t *testing.T) {
	tr := NewTracker(0x500)
	tr.Idle(0x400) // a keepalive older than the slot's position
	if got := tr.Flushed(0); got != 0x500 {
		t.Fatalf("Flushed = %s, want 0/500", got)
	}
}

func TestTrackerSkipsReplayedEvents(t *testing.T) {
	tr := NewTracker(0)
	if tr.Seen(decode.Position{}) {
		t.Fatal("a fresh tracker skips the very first position")
	}
	tr.Resume(pos(0x100, 2))
	for _, c := range []struct {
		p    decode.Position
		seen bool
	}{
		{pos(0x100, 0), true}, {pos(0x100, 2), true}, {pos(0x100, 3), false}, {pos(0x101, 0), false}, {pos(0x50, 9), true},
	} {
		if got := tr.Seen(c.p); got != c.seen {
			t.Errorf("Seen(%v) = %v, want %v", c.p, got, c.seen)
		}
	}
	tr.Handed(pos(0x200, 0), 1)
	if !tr.Seen(pos(0x200, 0)) || tr.Seen(pos(0x200, 1)) {
		t.Fatal("Seen does not follow Handed")
	}
}

// TestTrackerModel checks the Tracker against a direct model over random
// histories: the confirmed LSN is always the newest mark whose events are
// all acknowledged, and never passes an unacknowledged event.
func TestTrackerModel(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for run := 0; run < 200; run++ {
		tr := NewTracker(0)
		type markRec struct {
			seq uint64
			lsn pglogrepl.LSN
		}
		var all []markRec
		var seq, acked uint64
		lsn := pglogrepl.LSN(0x1000)
		for step := 0; step < 300; step++ {
			switch rng.Intn(4) {
			case 0, 1:
				seq++
				lsn += pglogrepl.LSN(rng.Intn(100) + 1)
				tr.Handed(pos(lsn, 0), seq)
			case 2:
				lsn += 8
				tr.Commit(lsn)
				all = append(all, markRec{seq, lsn})
			case 3:
				if acked < seq {
					acked += uint64(rng.Intn(int(seq-acked))) + 1
				}
				want := pglogrepl.LSN(0)
				for _, m := range all {
					if m.seq <= acked && m.lsn > want {
						want = m.lsn
					}
				}
				if got := tr.Flushed(acked); got != want {
					t.Fatalf("run %d step %d: Flushed(%d) = %s, model says %s", run, step, acked, got, want)
				}
			}
		}
		if tr.Pending() > int(seq-acked)+1 {
			t.Fatalf("run %d: %d marks pending for %d unacked events", run, tr.Pending(), seq-acked)
		}
	}
}

// TestTrackerMemoryBounded: under steady load marks are never all consumed
// at once; the slice must still stay bounded by the pending ones.
func TestTrackerMemoryBounded(t *testing.T) {
	tr := NewTracker(0)
	const inFlight = 100
	for seq := uint64(1); seq <= 1_000_000; seq++ {
		tr.Handed(pos(pglogrepl.LSN(seq*16), 0), seq)
		tr.Commit(pglogrepl.LSN(seq*16 + 8))
		if seq > inFlight {
			tr.Flushed(seq - inFlight)
		}
	}
	if c := cap(tr.marks); c > 4*inFlight {
		t.Fatalf("marks grew to capacity %d for %d pending", c, tr.Pending())
	}
}

// TestTrackerFork: after a timeline change forking at 0x400, nothing
// beyond 0x400 is confirmable, neither a point confirmed already (a
// keepalive of the old timeline) nor one waiting for acknowledgements;
// points of the new timeline after it are, as usual.
func TestTrackerFork(t *testing.T) {
	confirmed := NewTracker(0x100)
	confirmed.Handed(pos(0x200, 0), 1)
	confirmed.Commit(0x280)
	confirmed.Idle(0x900) // the old timeline's keepalive
	if got := confirmed.Flushed(1); got != 0x900 {
		t.Fatalf("Flushed(1) = %s, want the keepalive's 0/900", got)
	}
	confirmed.Fork(0x400)
	if got := confirmed.Flushed(1); got != 0x400 {
		t.Fatalf("after a fork at 0/400: Flushed(1) = %s, want 0/400", got)
	}
	confirmed.Idle(0x500) // the new timeline's keepalive
	if got := confirmed.Flushed(1); got != 0x500 {
		t.Fatalf("the new timeline's keepalive: Flushed(1) = %s, want 0/500", got)
	}

	pending := NewTracker(0x100)
	pending.Handed(pos(0x200, 0), 1)
	pending.Commit(0x280)
	pending.Idle(0x900)
	pending.Fork(0x400)
	if got := pending.Flushed(0); got != 0x100 {
		t.Fatalf("after a fork, before the event is acknowledged: Flushed(0) = %s, want 0/100", got)
	}
	if got := pending.Flushed(1); got != 0x400 {
		t.Fatalf("after a fork at 0/400, the event acknowledged: Flushed(1) = %s, want 0/400", got)
	}
}
