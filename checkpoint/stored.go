package checkpoint

import (
	"sort"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/decode"
)

// Stored is the set of positions the stream already holds from the slot's
// confirmed position on. When Postgres replays those transactions, the
// relay skips exactly these events and publishes the rest (an event that
// a failure left out, even if later ones got in), however long ago the
// stream's dedup window closed.
//
// Positions are kept as runs of consecutive indexes within a transaction,
// so a million-row transaction interrupted half way costs one run, not a
// million entries.
type Stored struct {
	runs []run // sorted by (lsn, first)
	n    int
}

type run struct {
	lsn         pglogrepl.LSN
	first, last uint32
}

// Add records that the stream holds the event at p. Adding in stream order
// (normally commit order) is cheapest.
func (s *Stored) Add(p decode.Position) {
	if k := len(s.runs); k > 0 {
		r := &s.runs[k-1]
		if r.lsn == p.CommitLSN && p.Index == r.last+1 {
			r.last++
			s.n++
			return
		}
	}
	if s.Contains(p) {
		return
	}
	i := sort.Search(len(s.runs), func(i int) bool { return !s.runs[i].before(p) })
	s.runs = append(s.runs, run{})
	copy(s.runs[i+1:], s.runs[i:])
	s.runs[i] = run{lsn: p.CommitLSN, first: p.Index, last: p.Index}
	s.n++
}

// before reports whether the run starts before p.
func (r run) before(p decode.Position) bool {
	return r.lsn < p.CommitLSN || (r.lsn == p.CommitLSN && r.first < p.Index)
}

// Contains reports whether the stream holds the event at p.
func (s *Stored) Contains(p decode.Position) bool {
	if s == nil || len(s.runs) == 0 {
		return false
	}
	// The last run that starts at or before p.
	i := sort.Search(len(s.runs), func(i int) bool {
		r := s.runs[i]
		return r.lsn > p.CommitLSN || (r.lsn == p.CommitLSN && r.first > p.Index)
	}) - 1
	return i >= 0 && s.runs[i].lsn == p.CommitLSN && p.Index <= s.runs[i].last
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
