package sink

import (
	"slices"
	"strings"
	"sync/atomic"

	"github.com/jackc/pglogrepl"
)

// Source identifies where the relay's messages come from. Commit
// positions alone do not: two relays publishing to one destination,
// clusters whose WAL positions overlap, and the timelines of a cluster
// after a point-in-time recovery or a promotion all produce equal
// positions for different events. Every message carries its Source (the
// Outbox-Source-* headers); the relay reads back only its own.
type Source struct {
	// System is the Postgres system identifier (IDENTIFY_SYSTEM), in
	// decimal. A physical standby shares its primary's.
	System string
	// Timeline is the timeline the relay streamed on when it published.
	Timeline uint32
	// Slot is the replication slot's name: unique within a cluster.
	Slot string
	// Origin is the slot's creation point (its consistent point), which
	// tells apart slots created one after another under one name; zero
	// where it is not known yet (rows published from the slot's snapshot
	// while it is created).
	Origin pglogrepl.LSN
	// Database and Table (schema.table) name the outbox table the events
	// come from: with System, the space an event's id is unique in (see
	// SameTable). Empty on messages of relays older than the
	// Outbox-Source-Database and Outbox-Source-Table headers.
	//
	// The source of a relay of several tables (its stamp, a reader's
	// owner) names them all in Table, comma-separated, its first table
	// first (Tables); each message it publishes carries the table of its
	// own event (OfEvent), so identity stays per table: a table's events
	// are known as its, whichever relay of one or several tables published
	// them.
	Database, Table string
}

// Tables returns the tables s names: one, or those of a relay of several,
// the first first; none when s names no table.
func (s Source) Tables() []string {
	if s.Table == "" {
		return nil
	}
	return strings.Split(s.Table, ",")
}

// Several reports whether s is the source of a relay of several tables.
func (s Source) Several() bool { return strings.Contains(s.Table, ",") }

// OfEvent returns the source a message of an event of table (schema.table;
// "" for a table-less event: a logical decoding message) carries: s with
// that table alone, or with s's first table for a table-less event. A
// source naming no table stays so.
func (s Source) OfEvent(table string) Source {
	if s.Table == "" || (table == s.Table && !s.Several()) {
		return s
	}
	if table == "" {
		table, _, _ = strings.Cut(s.Table, ",")
	}
	s.Table = table
	return s
}

// hasTable reports whether s names table, alone or among several.
func (s Source) hasTable(table string) bool {
	if !s.Several() {
		return s.Table == table
	}
	return slices.Contains(s.Tables(), table)
}

// IsZero reports whether s identifies nothing.
func (s Source) IsZero() bool { return s.System == "" }

// SameRelay reports whether a message stamped with m was published by the
// relay s describes: the same cluster and slot name, whatever the slot's
// incarnation or the timeline. A zero s matches nothing.
func (s Source) SameRelay(m Source) bool {
	return !s.IsZero() && s.System == m.System && s.Slot == m.Slot
}

// SameSlot reports whether a message stamped with m was decoded from the
// very slot s describes: the same relay and the same creation point, known
// on both sides. Only such messages can tell which events of a replay the
// destination holds; the timeline does not matter, as the event's id is
// compared too.
func (s Source) SameSlot(m Source) bool {
	return s.SameRelay(m) && s.Origin != 0 && s.Origin == m.Origin
}

// SameTable reports whether a message stamped with m carries an event of
// the table s describes, read from the same Postgres system, whatever the
// slot (or polling relay) that published it: the event's id then names
// the same event, so the stream holds it. This is the identity every
// take-up compares by, never the slot's name. The source of a relay of
// several tables matches a message of any of them. A message without the table
// headers (an older relay's) is taken for the table's only when it also
// names s's slot: an older relay read one table per slot. A zero s
// matches nothing.
func (s Source) SameTable(m Source) bool {
	if s.IsZero() || s.System != m.System {
		return false
	}
	if s.Table == "" || m.Table == "" {
		return s.Slot == m.Slot
	}
	return s.Database == m.Database && s.hasTable(m.Table)
}

// OfTable reports whether a stored message may carry an event of the
// table src describes, for comparing the table with the stream (verify,
// status, a take-up): the same system and table (Source.SameTable), or
// not stamped at all (published by a relay older than the Outbox-Source-*
// headers, which may be this table's). A zero src takes every relay
// message for its own.
func OfTable(ev StoredEvent, src Source) bool {
	return src.IsZero() || ev.Source.IsZero() || src.SameTable(ev.Source)
}

// OwnedBy reports whether a stored message may be the relay's whose
// source is src, for counting what the relay published: stamped with
// src's cluster and slot, or not stamped at all (published by an older
// relay, which may be this one). A zero src owns every relay message.
func OwnedBy(ev StoredEvent, src Source) bool {
	return src.IsZero() || ev.Source.IsZero() || src.SameRelay(ev.Source)
}

// Stamp is the Source a Destination stamps on its messages. The relay
// knows its cluster and slot before it publishes anything, the slot's
// creation point only once the slot exists, and a new timeline after a
// promotion: Set changes the source of the messages written from then on.
// A Stamp is safe for concurrent use.
type Stamp struct {
	cur atomic.Pointer[Source]
}

// NewStamp returns a Stamp holding src.
func NewStamp(src Source) *Stamp {
	st := &Stamp{}
	st.cur.Store(&src)
	return st
}

// Set makes src the source of the messages written from now on.
func (st *Stamp) Set(src Source) {
	if st.Source() != src {
		st.cur.Store(&src)
	}
}

// Source returns the source stamped now (zero for a nil Stamp).
func (st *Stamp) Source() Source {
	if p := st.Current(); p != nil {
		return *p
	}
	return Source{}
}

// Current returns the source stamped now, nil for a nil Stamp. Each Set
// that changes the source returns a new pointer from then on, so a
// destination can keep the source's encoded form until the pointer
// changes instead of encoding it for every message.
func (st *Stamp) Current() *Source {
	if st == nil {
		return nil
	}
	return st.cur.Load()
}
