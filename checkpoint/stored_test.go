package checkpoint

import (
	"fmt"
	"math/rand"
	"strconv"
	"testing"

	"github.com/outbox-relay/outbox-relay/decode"
)

// idAt is the id the tests store at p.
func idAt(p decode.Position) string {
	return strconv.FormatUint(uint64(p.CommitLSN), 16) + "-" + strconv.FormatUint(uint64(p.Index), 10)
}

func TestStoredRuns(t *testing.T) {
	var s Stored
	for i := uint32(0); i < 1_000_000; i++ {
		s.Add(pos(0x100, i), idAt(pos(0x100, i)))
	}
	s.Add(pos(0x200, 0), idAt(pos(0x200, 0)))
	s.Add(pos(0x200, 2), idAt(pos(0x200, 2))) // index 1 is a hole
	if s.Runs() != 3 || s.Len() != 1_000_002 {
		t.Fatalf("runs %d, len %d", s.Runs(), s.Len())
	}
	for _, c := range []struct {
		p    decode.Position
		want bool
	}{
		{pos(0x100, 0), true}, {pos(0x100, 999_999), true}, {pos(0x100, 1_000_000), false},
		{pos(0x200, 0), true}, {pos(0x200, 1), false}, {pos(0x200, 2), true}, {pos(0x50, 0), false}, {pos(0x300, 0), false},
	} {
		if got := s.Contains(c.p); got != c.want {
			t.Errorf("Contains(%v) = %v, want %v", c.p, got, c.want)
		}
		if got := s.Holds(c.p, idAt(c.p)); got != c.want {
			t.Errorf("Holds(%v, its id) = %v, want %v", c.p, got, c.want)
		}
	}
	var empty *Stored
	if empty.Contains(pos(1, 1)) || empty.Holds(pos(1, 1), "x") || empty.Len() != 0 {
		t.Error("nil Stored is not empty")
	}
}

// TestStoredHoldsOnlyItsID: a position the stream holds with another id
// (another relay's event, or one from before a timeline change) is not
// the replayed event's, so it must not be skipped.
func TestStoredHoldsOnlyItsID(t *testing.T) {
	var s Stored
	s.Add(pos(0x100, 0), "a")
	s.Add(pos(0x100, 1), "b")
	s.Add(pos(0x100, 2), "c")
	s.Add(pos(0x80, 4), "early") // out of order: a run of its own
	for _, c := range []struct {
		p    decode.Position
		id   string
		want bool
	}{
		{pos(0x100, 0), "a", true}, {pos(0x100, 1), "b", true}, {pos(0x100, 2), "c", true},
		{pos(0x100, 1), "a", false}, {pos(0x100, 1), "", false}, {pos(0x100, 1), "bb", false},
		{pos(0x80, 4), "early", true}, {pos(0x80, 4), "earl", false},
	} {
		if got := s.Holds(c.p, c.id); got != c.want {
			t.Errorf("Holds(%v, %q) = %v, want %v", c.p, c.id, got, c.want)
		}
	}
	// A second event stored at a position: both ids count, the position once.
	s.Add(pos(0x100, 1), "b2")
	s.Add(pos(0x100, 1), "b") // read again: no change
	if !s.Holds(pos(0x100, 1), "b") || !s.Holds(pos(0x100, 1), "b2") || s.Holds(pos(0x100, 1), "b3") {
		t.Error("a position stored twice does not hold exactly its two ids")
	}
	if s.Len() != 4 {
		t.Errorf("Len %d, want 4 positions", s.Len())
	}
	if id, ok := s.ID(pos(0x100, 2)); !ok || id != "c" {
		t.Errorf("ID = %q, %v", id, ok)
	}
}

// TestStoredModel checks Stored against a plain map for random positions
// and ids added out of order.
func TestStoredModel(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	var s Stored
	model := map[decode.Position]map[string]bool{}
	for i := 0; i < 5000; i++ {
		p := pos(lsn(uint64(rng.Intn(20))*0x10), uint32(rng.Intn(30)))
		id := fmt.Sprintf("e%d", rng.Intn(3)) // sometimes a second id at a position
		s.Add(p, id)
		if model[p] == nil {
			model[p] = map[string]bool{}
		}
		model[p][id] = true
	}
	for l := uint64(0); l < 20; l++ {
		for i := uint32(0); i < 32; i++ {
			p := pos(lsn(l*0x10), i)
			if s.Contains(p) != (model[p] != nil) {
				t.Fatalf("Contains(%v) = %v, model %v", p, s.Contains(p), model[p])
			}
			for k := 0; k < 4; k++ {
				id := fmt.Sprintf("e%d", k)
				if s.Holds(p, id) != model[p][id] {
					t.Fatalf("Holds(%v, %s) = %v, model %v", p, id, s.Holds(p, id), model[p][id])
				}
			}
		}
	}
	if s.Len() != len(model) {
		t.Fatalf("Len %d, model %d", s.Len(), len(model))
	}
}

func BenchmarkStoredHolds(b *testing.B) {
	var s Stored
	for i := uint32(0); i < 10_000; i++ {
		s.Add(pos(0x100, i), idAt(pos(0x100, i)))
	}
	p := pos(0x100, 5000)
	id := idAt(p)
	b.ReportAllocs()
	for b.Loop() {
		if !s.Holds(p, id) {
			b.Fatal("not held")
		}
	}
}
