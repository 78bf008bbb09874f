package checkpoint

import (
	"slices"
	"sort"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/decode"
)

// Stored is what the stream already holds from the slot's confirmed
// position on: for each position, the id of the event stored there. When
// Postgres replays those transactions, the relay skips exactly the events
// the stream holds, at their position and with their id, and publishes
// the rest (an event that a failure left out, even if later ones got in;
// an event whose position the stream holds with another id, after a
// timeline change), however long ago the stream's dedup window closed.
//
// Positions are kept as runs of consecutive indexes within a transaction,
// each with its ids packed in one buffer, so a million-row transaction
// interrupted half way costs one run and the ids' bytes (plus 4 bytes an
// event), not a million entries.
type Stored struct {
	runs []run // sorted by (lsn, first)
	n    int
	// more holds further ids stored at a position that already has one (the
	// stream holds two events there: a timeline change, or another writer).
	more map[decode.Position][]string
}

type run struct {
	lsn         pglogrepl.LSN
	first, last uint32
	ids         []byte   // the ids of first..last, concatenated
	ends        []uint32 // ends[i] is where the id of first+i ends in ids
}

// id returns the id stored at index i of the run.
func (r *run) id(i uint32) string {
	k := i - r.first
	start := uint32(0)
	if k > 0 {
		start = r.ends[k-1]
	}
	return string(r.ids[start:r.ends[k]])
}

// idIs reports whether the id stored at index i of the run is id, without
// allocating.
func (r *run) idIs(i uint32, id string) bool {
	k := i - r.first
	start := uint32(0)
	if k > 0 {
		start = r.ends[k-1]
	}
	return string(r.ids[start:r.ends[k]]) == id
}

func (r *run) push(id string) {
	r.ids = append(r.ids, id...)
	r.ends = append(r.ends, uint32(len(r.ids)))
}

// Add records that the stream holds the event with id at p. Adding in
// stream order (normally commit order) is cheapest.
func (s *Stored) Add(p decode.Position, id string) {
	if k := len(s.runs); k > 0 {
		r := &s.runs[k-1]
		if r.lsn == p.CommitLSN && p.Index == r.last+1 {
			r.last++
			r.push(id)
			s.n++
			return
		}
	}
	if r := s.find(p); r != nil {
		if !r.idIs(p.Index, id) && !slices.Contains(s.more[p], id) {
			if s.more == nil {
				s.more = map[decode.Position][]string{}
			}
			s.more[p] = append(s.more[p], id)
		}
		return
	}
	i := sort.Search(len(s.runs), func(i int) bool { return !s.runs[i].before(p) })
	s.runs = append(s.runs, run{})
	copy(s.runs[i+1:], s.runs[i:])
	s.runs[i] = run{lsn: p.CommitLSN, first: p.Index, last: p.Index}
	s.runs[i].push(id)
	s.n++
}

// before reports whether the run starts before p.
func (r run) before(p decode.Position) bool {
	return r.lsn < p.CommitLSN || (r.lsn == p.CommitLSN && r.first < p.Index)
}

// find returns the run holding p, or nil.
func (s *Stored) find(p decode.Position) *run {
	if s == nil || len(s.runs) == 0 {
		return nil
	}
	// The last run that starts at or before p.
	i := sort.Search(len(s.runs), func(i int) bool {
		r := s.runs[i]
		return r.lsn > p.CommitLSN || (r.lsn == p.CommitLSN && r.first > p.Index)
	}) - 1
	if i >= 0 && s.runs[i].lsn == p.CommitLSN && p.Index <= s.runs[i].last {
		return &s.runs[i]
	}
	return nil
}

// Holds reports whether the stream holds the event with id at p: the only
// case in which a replayed event may be skipped. A position the stream
// holds with another id is not the event's.
func (s *Stored) Holds(p decode.Position, id string) bool {
	r := s.find(p)
	if r == nil {
		return false
	}
	return r.idIs(p.Index, id) || slices.Contains(s.more[p], id)
}

// Contains reports whether the stream holds an event, whatever its id,
// at p.
func (s *Stored) Contains(p decode.Position) bool { return s.find(p) != nil }

// ID returns the id the stream holds at p (the first one read when it
// holds several), and whether it holds any.
func (s *Stored) ID(p decode.Position) (string, bool) {
	r := s.find(p)
	if r == nil {
		return "", false
	}
	return r.id(p.Index), true
}

// Len returns how many positions are recorded.
func (s *Stored) Len() int {
	if s == nil {
		return 0
	}
	return s.n
}

// Runs returns how many runs hold them.
func (s *Stored) Runs() int {
	if s == nil {
		return 0
	}
	return len(s.runs)
}
