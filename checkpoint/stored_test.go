package checkpoint

import (
	"math/rand"
	"testing"

	"github.com/outbox-relay/outbox-relay/decode"
)

func TestStoredRuns(t *testing.T) {
	var s Stored
	for i := uint32(0); i < 1_000_000; i++ {
		s.Add(pos(0x100, i))
	}
	s.Add(pos(0x200, 0))
	s.Add(pos(0x200, 2)) // index 1 is a hole
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
	}
	var empty *Stored
	if empty.Contains(pos(1, 1)) || empty.Len() != 0 {
		t.Error("nil Stored is not empty")
	}
}

// TestStoredModel checks Stored against a plain set for random positions
// added out of order.
func TestStoredModel(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	var s Stored
	model := map[decode.Position]bool{}
	for i := 0; i < 5000; i++ {
		p := pos(lsn(uint64(rng.Intn(20))*0x10), uint32(rng.Intn(30)))
		s.Add(p)
		model[p] = true
	}
	for l := uint64(0); l < 20; l++ {
		for i := uint32(0); i < 32; i++ {
			p := pos(lsn(l*0x10), i)
			if s.Contains(p) != model[p] {
				t.Fatalf("Contains(%v) = %v, model %v", p, s.Contains(p), model[p])
			}
		}
	}
	if s.Len() != len(model) {
		t.Fatalf("Len %d, model %d", s.Len(), len(model))
	}
}
