package relaytest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/verify"
)

// TestLeaderChangeBound: inversions are tolerated only between events in
// (P0, P0 + 2×Window] in commit order, the later one stored after the
// kill's sequence and the earlier one no later than the recovery's.
func TestLeaderChangeBound(t *testing.T) {
	// 100 events e1..e100 committed in order (one per transaction), stored
	// at sequences 1..100 in commit order but where a case swaps them.
	build := func(swaps ...[2]int) storedOrder {
		order := storedOrder{}
		seqOf := map[int]uint64{}
		for i := 1; i <= 100; i++ {
			seqOf[i] = uint64(i)
		}
		for _, s := range swaps {
			seqOf[s[0]], seqOf[s[1]] = seqOf[s[1]], seqOf[s[0]]
		}
		for i := 1; i <= 100; i++ {
			order[id(i)] = storedAt{pos: decode.Position{CommitLSN: pglogrepl.LSN(i * 100)}, seq: seqOf[i]}
		}
		return order
	}
	// The kill at sequence 40 (P0 = e40), window 5: (e40, e50] may bend,
	// up to sequence 70.
	lc := LeaderChange{Before: 40, Recovered: 70, Window: 5}
	for _, c := range []struct {
		name     string
		late     int // stored after `after`, committed before it
		after    int
		tolerate bool
	}{
		{"both in flight", 42, 45, true},
		{"up to the bound", 41, 50, true},
		{"past the bound", 45, 51, false},
		{"committed before the kill's position", 40, 45, false},
		{"far before", 10, 20, false},
		{"far after", 80, 85, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			order := build([2]int{c.late, c.after})
			r := Result{
				Inversions:    []string{"global"},
				invPairs:      []orderPair{{late: id(c.late), after: id(c.after)}},
				SeqInversions: []string{"payload"},
				seqPairs:      []orderPair{{late: id(c.late), after: id(c.after)}},
			}
			r.OrderViolations = []verify.Violation{{Aggregate: "a", EventID: id(c.late), After: id(c.after)}}
			r.tolerate([]LeaderChange{lc}, order)
			kept := len(r.Inversions) + len(r.SeqInversions) + len(r.OrderViolations)
			switch {
			case c.tolerate && (kept != 0 || len(r.Tolerated) != 3):
				t.Errorf("%s stored after %s: kept %d inversions, tolerated %v; want all 3 tolerated", id(c.late), id(c.after), kept, r.Tolerated)
			case !c.tolerate && (kept != 3 || len(r.Tolerated) != 0):
				t.Errorf("%s stored after %s: kept %d inversions, tolerated %v; want none tolerated", id(c.late), id(c.after), kept, r.Tolerated)
			}
		})
	}
	// Stored after the recovery: not tolerated.
	order := build([2]int{42, 45})
	order[id(42)] = storedAt{pos: order[id(42)].pos, seq: 71}
	r := Result{Inversions: []string{"global"}, invPairs: []orderPair{{late: id(42), after: id(45)}}}
	r.tolerate([]LeaderChange{lc}, order)
	if len(r.Inversions) != 1 || !strings.Contains(strings.Join(r.Inversions, ""), "global") {
		t.Errorf("an event stored after the recovery's sequence was tolerated: %v", r.Tolerated)
	}
}

func id(i int) string { return fmt.Sprintf("e%d", i) }
