package relaytest

import (
	"fmt"
	"slices"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/verify"
)

// LeaderChange is a stream leader killed while the relay published: the one
// case where docs/guarantees.md lets an event land after a later one (a
// leader that refused one message while the next was stored; the relay
// republishes the refused one). It bounds that exception to the events
// that can have been in flight then, so that any other reordering fails.
//
// The bound: up to the kill the healthy leader stored in commit order, so
// the events not stored yet come after P0, the highest commit position
// among the messages at stream sequences up to Before (read just before
// the kill). The relay never has more than Window events sent and not
// acknowledged: when Before was read its first unacknowledged event was
// at most one past P0, and the kill follows that read by one request, in
// which at most one more window can be acknowledged. Everything it sends
// until it notices the failure, and the republish in order from its first
// unacknowledged event, lies within Window events of that event. So both
// events of a tolerated inversion lie in (P0, P0 + 2×Window events] in
// commit order, the later-committed one was stored after Before, and the
// earlier one no later than Recovered (the stream's last sequence once
// the slot confirmed the WAL written before the node came back).
type LeaderChange struct {
	// Before is the stream's last sequence read just before the kill.
	Before uint64
	// Recovered is the stream's last sequence once the relay recovered.
	Recovered uint64
	// Window is the relay's --window: the most events it has sent and not
	// seen acknowledged.
	Window int
}

// storedAt is where the first copy of an event is: its commit position and
// stream sequence.
type storedAt struct {
	pos decode.Position
	seq uint64
}

// storedOrder holds, per event id, the first copy of the events that take
// part in commit order (not dead letters, not published from the table).
type storedOrder map[string]storedAt

// orderPair names an inversion: event late is stored after event after,
// which committed later.
type orderPair struct{ late, after string }

// inFlightRange returns the commit positions (lo, hi] of the events that
// can have been in flight at lc (see LeaderChange), given every stored
// position in commit order.
func (lc LeaderChange) inFlightRange(order storedOrder, sorted []decode.Position) (lo, hi decode.Position) {
	for _, at := range order {
		if at.seq <= lc.Before && lo.Less(at.pos) {
			lo = at.pos
		}
	}
	i, _ := slices.BinarySearchFunc(sorted, lo, comparePositions)
	if j := i + 2*lc.Window; j < len(sorted) {
		return lo, sorted[j]
	}
	return lo, decode.Position{CommitLSN: ^pglogrepl.LSN(0), Index: ^uint32(0)}
}

func comparePositions(a, b decode.Position) int {
	switch {
	case a.Less(b):
		return -1
	case b.Less(a):
		return 1
	}
	return 0
}

// leaderWindow is one LeaderChange's bounds, computed once.
type leaderWindow struct {
	LeaderChange
	lo, hi decode.Position
}

// allows reports whether the inversion p falls within w.
func (w leaderWindow) allows(p orderPair, order storedOrder) bool {
	late, ok1 := order[p.late]
	after, ok2 := order[p.after]
	return ok1 && ok2 &&
		w.lo.Less(late.pos) && late.pos.Less(after.pos) && !w.hi.Less(after.pos) &&
		after.seq > w.Before && late.seq <= w.Recovered
}

// tolerate moves the inversions (commit order, per aggregate by position
// and by payload sequence) that one of lcs allows from their lists to
// r.Tolerated.
func (r *Result) tolerate(lcs []LeaderChange, order storedOrder) {
	sorted := make([]decode.Position, 0, len(order))
	for _, at := range order {
		sorted = append(sorted, at.pos)
	}
	slices.SortFunc(sorted, comparePositions)
	var ws []leaderWindow
	for _, lc := range lcs {
		lo, hi := lc.inFlightRange(order, sorted)
		ws = append(ws, leaderWindow{LeaderChange: lc, lo: lo, hi: hi})
	}
	allowed := func(p orderPair) (string, bool) {
		for i, w := range ws {
			if w.allows(p, order) {
				return fmt.Sprintf("leader change %d (stream seq %d, positions (%s, %s])", i+1, w.Before, w.lo, w.hi), true
			}
		}
		return "", false
	}
	r.Inversions, r.invPairs = r.keep(r.Inversions, r.invPairs, allowed)
	r.SeqInversions, r.seqPairs = r.keep(r.SeqInversions, r.seqPairs, allowed)
	var kept []verify.Violation
	for _, v := range r.OrderViolations {
		if why, ok := allowed(orderPair{late: v.EventID, after: v.After}); ok {
			r.Tolerated = append(r.Tolerated, fmt.Sprintf("%s: %s stored after %s, within %s", v.Aggregate, v.EventID, v.After, why))
			continue
		}
		kept = append(kept, v)
	}
	r.OrderViolations = kept
}

// keep returns the inversions of texts (named by pairs) that allowed does
// not allow, and adds the others to r.Tolerated.
func (r *Result) keep(texts []string, pairs []orderPair, allowed func(orderPair) (string, bool)) ([]string, []orderPair) {
	var kt []string
	var kp []orderPair
	for i, p := range pairs {
		if why, ok := allowed(p); ok {
			r.Tolerated = append(r.Tolerated, texts[i]+", within "+why)
			continue
		}
		kt, kp = append(kt, texts[i]), append(kp, p)
	}
	return kt, kp
}
