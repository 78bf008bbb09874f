package relaytest

import (
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/decode"
)

// TestInversionsBound: an event stored after later ones is tolerated only
// when every one of those was stored within one span, bounds included.
func TestInversionsBound(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ev := func(id string, lsn pglogrepl.LSN, ms int) orderedEvent {
		return orderedEvent{id: id, pos: decode.Position{CommitLSN: lsn}, at: at(ms)}
	}
	span := []ReorderSpan{{From: at(100), To: at(200)}, {From: at(200), To: at(300)}}
	for _, tc := range []struct {
		name   string
		order  []orderedEvent // the last one is stored after later ones
		spans  []ReorderSpan
		within bool
	}{
		{"overtaken within a span", []orderedEvent{ev("a", 10, 50), ev("c", 30, 120), ev("d", 40, 150), ev("b", 20, 250)}, span, true},
		{"at the span's bounds", []orderedEvent{ev("c", 30, 100), ev("d", 40, 200), ev("b", 20, 250)}, span, true},
		{"no spans", []orderedEvent{ev("c", 30, 120), ev("b", 20, 250)}, nil, false},
		{"an overtaker before the span", []orderedEvent{ev("c", 30, 99), ev("d", 40, 150), ev("b", 20, 250)}, span, false},
		{"overtakers across two spans", []orderedEvent{ev("c", 30, 150), ev("d", 40, 250), ev("b", 20, 260)}, span, false},
		{"an overtaker after the last span", []orderedEvent{ev("c", 30, 301), ev("b", 20, 310)}, span, false},
		{"earlier events outside do not count", []orderedEvent{ev("a", 10, 5), ev("c", 30, 220), ev("b", 20, 240)}, span, true},
	} {
		order := tc.order
		last := order[len(order)-1]
		order[len(order)-1].top, order[len(order)-1].topPos = order[len(order)-2].id, order[len(order)-2].pos
		all, tolerated := inversions(order, []int{len(order) - 1}, tc.spans)
		if len(all) != 1 || (len(tolerated) == 1) != tc.within {
			t.Errorf("%s: event %s: inversions %v, tolerated %v, want tolerated: %v", tc.name, last.id, all, tolerated, tc.within)
		}
		if out := outside(all, tolerated); len(out)+len(tolerated) != len(all) {
			t.Errorf("%s: outside %v and tolerated %v do not split %v", tc.name, out, tolerated, all)
		}
	}
}
