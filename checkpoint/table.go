package checkpoint

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/sink"
)

// TableHoldings is what the destination holds of a table's events, by
// their identity: the ids (sink.StoredID) of the messages of the table
// (sink.OfTable: its Postgres system and table, whatever slot, polling
// relay or one-shot command published them, and messages of relays older
// than the Outbox-Source-* headers), except the copies `replay` publishes
// (sink.StoredEvent.Copy), which hold no event. It answers "does the stream hold this
// row's event?" for the rows a take-up reads from the table (the rows
// present at a new slot's creation, a repair's), so that a new or renamed
// slot, a lost record, a repair or a second deployment publishes only what
// the stream lacks. Holdings answers the same question for the events a
// slot replays, by position and id; both go by the same identity.
//
// It is read with one headers-only pass over the destination, from a
// bound on (see ReadTableHoldings), and keeps the ids of the table's
// messages packed and sorted: its memory follows how many of them the
// stream holds from that bound on, not the stream's size (a 36-byte UUID
// costs 44 bytes: 44 MB for a million).
type TableHoldings struct {
	// ids holds the ids' bytes back to back, in the order read; id i is
	// ids[offs[i]:offs[i+1]]. sorted lists the ids' indexes in id order,
	// for a binary search: about 8 bytes an id beyond its own bytes,
	// where a map of strings costs some 56.
	ids    []byte
	offs   []uint32
	sorted []uint32
	// read counts the messages read.
	read int
}

// ClockMargin is how far before the oldest row's created_at the
// destination is read: more than any skew between the Postgres and NATS
// clocks, and than the time an event may have waited for a relay (verify
// reads the stream with the same margin).
const ClockMargin = time.Hour

// progressEvery is how often a long read logs how far it got.
const progressEvery = 10 * time.Second

// ReadTableHoldings reads what r holds of the events of r's owner's table
// (all relay messages when r has no owner), stored at or after oldest
// minus ClockMargin: oldest is the created_at of the oldest row the
// caller may publish, and a message stored well before it cannot carry
// it (zero reads the whole destination). It logs its progress every ten
// seconds and its cost when done.
func ReadTableHoldings(ctx context.Context, r sink.Reader, oldest time.Time, log zerolog.Logger) (*TableHoldings, error) {
	owner := r.Owner()
	from := oldest
	if !from.IsZero() {
		from = from.Add(-ClockMargin)
	}
	h := &TableHoldings{offs: []uint32{0}}
	began := time.Now()
	var tooMany error
	next := began.Add(progressEvery)
	err := r.Scan(ctx, from, func(ev sink.StoredEvent, ok bool) bool {
		h.read++
		if ok && ev.ID != "" && !ev.Copy() && sink.OfTable(ev, owner) {
			for _, id := range heldIDs(ev, owner) {
				if tooMany = h.add(id); tooMany != nil {
					return false
				}
			}
		}
		if now := time.Now(); now.After(next) {
			next = now.Add(progressEvery)
			log.Info().Int("messages", h.read).Int("held", h.Len()).Dur("elapsed", now.Sub(began)).Str("table", owner.Table).
				Msg("reading the stream for the table's events it holds")
		}
		return true
	})
	if err == nil {
		err = tooMany
	}
	if err != nil {
		return nil, fmt.Errorf("read which of the table's events the stream holds: %w", err)
	}
	h.sort()
	ev := log.Info()
	if !from.IsZero() {
		ev = ev.Time("stored_since", from)
	}
	ev.Int("messages", h.read).Int("held", h.Len()).Dur("took", time.Since(began)).Str("table", owner.Table).
		Msg("read which of the table's events the stream holds")
	return h, nil
}

// heldIDs are the ids under which Holds finds ev's event (sink.StoredID
// of a row's event): the id it is stored under, in the form owner's relay
// gives its events. A relay of several tables qualifies its ids by their
// table (schema.table/id), a relay of one does not, and a table may move
// from one to the other (a table added to a relay, a relay split): a
// message of the table stored with a plain id counts, for a relay of
// several, under its qualified id, and one stored with a qualified id
// counts, for a relay of one, under its plain id as well. A plain id that
// happens to read as qualified by its own table keeps that form too.
func heldIDs(ev sink.StoredEvent, owner sink.Source) []string {
	table := ev.Table
	if table == "" && !ev.Source.Several() {
		table = ev.Source.Table
	}
	if table == "" {
		table = owner.OfEvent("").Table
	}
	if table == "" {
		return []string{ev.ID}
	}
	plain, qualified := strings.CutPrefix(ev.ID, contract.QualifiedID(table, ""))
	switch {
	case owner.Several() && qualified:
		return []string{ev.ID, contract.QualifiedID(table, ev.ID)}
	case owner.Several():
		return []string{contract.QualifiedID(table, ev.ID)}
	case qualified:
		return []string{ev.ID, plain}
	default:
		return []string{ev.ID}
	}
}

// add keeps id; it fails past 4 GiB of ids (a hundred million of them).
func (h *TableHoldings) add(id string) error {
	if uint64(len(h.ids))+uint64(len(id)) > math.MaxUint32 {
		return fmt.Errorf("the stream holds more than 4 GiB of the table's event ids: give the take-up a bound (--repair-since), or let the stream's limits remove old messages")
	}
	h.ids = append(h.ids, id...)
	h.offs = append(h.offs, uint32(len(h.ids)))
	return nil
}

// id returns the id at index i, without copying.
func (h *TableHoldings) id(i uint32) string {
	return unsafeString(h.ids[h.offs[i]:h.offs[i+1]])
}

// sort orders the ids for Holds, and gives back what appending left
// unused.
func (h *TableHoldings) sort() {
	h.ids, h.offs = slices.Clone(h.ids), slices.Clone(h.offs)
	h.sorted = make([]uint32, len(h.offs)-1)
	for i := range h.sorted {
		h.sorted[i] = uint32(i)
	}
	slices.SortFunc(h.sorted, func(a, b uint32) int { return strings.Compare(h.id(a), h.id(b)) })
}

// Holds reports whether the destination holds ev's event (a message of
// the table with ev's id, or its dead letter).
func (h *TableHoldings) Holds(ev *decode.Event) bool {
	if h == nil {
		return false
	}
	id := sink.StoredID(ev)
	_, ok := slices.BinarySearchFunc(h.sorted, id, func(i uint32, id string) int { return strings.Compare(h.id(i), id) })
	return ok
}

// Len returns how many of the table's events it holds.
func (h *TableHoldings) Len() int {
	if h == nil {
		return 0
	}
	return len(h.offs) - 1
}

// Read returns how many messages were read.
func (h *TableHoldings) Read() int {
	if h == nil {
		return 0
	}
	return h.read
}
