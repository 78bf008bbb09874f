package relaytest

import (
	"fmt"
	"slices"
	"time"

	"github.com/outbox-relay/outbox-relay/decode"
)

// ReorderSpan is when a stream leader change may store an event after
// later ones (docs/guarantees.md, "Order"): from the instant the leader
// went to the end of the relay's recovery. An event on the wire then can
// be lost or refused while later ones, sent before the relay noticed and
// paused, are stored by the new leader; the relay republishes it after
// them. Once recovered it sends in order from the first unacknowledged
// event, so every event that overtakes another is stored within the span.
type ReorderSpan struct {
	From, To time.Time
}

func (s ReorderSpan) String() string {
	return fmt.Sprintf("[%s, %s]", s.From.Format(timeOfDay), s.To.Format(timeOfDay))
}

const timeOfDay = "15:04:05.000"

// orderedEvent is the first copy of an event that has a place in commit
// order, as the stream stored it; top and topPos, for one stored after a
// later event, are the latest event stored before it.
type orderedEvent struct {
	id     string
	pos    decode.Position
	seq    uint64
	at     time.Time
	top    string
	topPos decode.Position
}

// inversions describes each event of order at an index in inverted
// (stored after a later event), and returns those descriptions and the
// ones tolerated by spans: every event that overtook it (stored before
// it, committed after it) was stored within one span.
func inversions(order []orderedEvent, inverted []int, spans []ReorderSpan) (all, tolerated []string) {
	for i, k := range inverted {
		e := order[k]
		if i >= maxClassified {
			// Far beyond any leader change: described, never tolerated.
			all = append(all, fmt.Sprintf("event %s (%s #%d) stored at seq %d after %s (%s #%d)",
				e.id, e.pos.CommitLSN, e.pos.Index, e.seq, e.top, e.topPos.CommitLSN, e.topPos.Index))
			continue
		}
		var first, last time.Time
		n := 0
		for _, o := range order[:k] {
			if !e.pos.Less(o.pos) {
				continue
			}
			if n == 0 || o.at.Before(first) {
				first = o.at
			}
			if n == 0 || o.at.After(last) {
				last = o.at
			}
			n++
		}
		desc := fmt.Sprintf("event %s (%s #%d) stored at seq %d (%s) after %s (%s #%d), overtaken by %d events stored from %s to %s",
			e.id, e.pos.CommitLSN, e.pos.Index, e.seq, e.at.Format(timeOfDay), e.top, e.topPos.CommitLSN, e.topPos.Index,
			n, first.Format(timeOfDay), last.Format(timeOfDay))
		all = append(all, desc)
		if slices.ContainsFunc(spans, func(s ReorderSpan) bool { return !first.Before(s.From) && !last.After(s.To) }) {
			tolerated = append(tolerated, desc)
		}
	}
	return all, tolerated
}

// maxClassified bounds the inversions whose overtakers are looked up (a
// scan of the stream before each): a leader change reorders at most a
// publish window's worth.
const maxClassified = 5_000

// outside returns the descriptions of all that are not in tolerated.
func outside(all, tolerated []string) []string {
	var out []string
	for _, d := range all {
		if !slices.Contains(tolerated, d) {
			out = append(out, d)
		}
	}
	return out
}
