package checkpoint

import (
	"context"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/sink"
)

// TableHoldings is what the destination holds of a table's events, by
// their identity: the ids (sink.StoredID) of the messages of the table
// (sink.OfTable: its Postgres system and table, whatever slot, polling
// relay or one-shot command published them, and messages of relays older
// than the Outbox-Source-* headers). It answers "does the stream hold this
// row's event?" for the rows a take-up reads from the table (the rows
// present at a new slot's creation, a repair's), so that a new or renamed
// slot, a lost record, a repair or a second deployment publishes only what
// the stream lacks. Holdings answers the same question for the events a
// slot replays, by position and id; both go by the same identity.
//
// It is read with one headers-only pass over the destination, from a
// bound on (see ReadTableHoldings), and keeps the ids of the table's
// messages: its memory follows how many of them the stream holds from
// that bound on, not the stream's size.
type TableHoldings struct {
	ids map[string]struct{}
	// arena holds the ids' bytes, a block at a time, so that each id
	// costs its bytes and a map entry, not an allocation of its own.
	arena []byte
	// read counts the messages read, kept those of the table.
	read, kept int
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
	h := &TableHoldings{ids: map[string]struct{}{}}
	began := time.Now()
	next := began.Add(progressEvery)
	err := r.Scan(ctx, from, func(ev sink.StoredEvent, ok bool) bool {
		h.read++
		if ok && ev.ID != "" && sink.OfTable(ev, owner) {
			h.add(ev.ID)
		}
		if now := time.Now(); now.After(next) {
			next = now.Add(progressEvery)
			log.Info().Int("messages", h.read).Int("held", h.kept).Dur("elapsed", now.Sub(began)).Str("table", owner.Table).
				Msg("reading the stream for the table's events it holds")
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("read which of the table's events the stream holds: %w", err)
	}
	ev := log.Info()
	if !from.IsZero() {
		ev = ev.Time("stored_since", from)
	}
	ev.Int("messages", h.read).Int("held", h.kept).Dur("took", time.Since(began)).Str("table", owner.Table).
		Msg("read which of the table's events the stream holds")
	return h, nil
}

// arenaBlock is the size of one block of the ids' arena.
const arenaBlock = 1 << 20

func (h *TableHoldings) add(id string) {
	if _, ok := h.ids[id]; ok {
		return
	}
	if len(h.arena)+len(id) > cap(h.arena) {
		h.arena = make([]byte, 0, max(arenaBlock, len(id)))
	}
	start := len(h.arena)
	h.arena = append(h.arena, id...)
	h.ids[unsafeString(h.arena[start:])] = struct{}{}
	h.kept++
}

// Holds reports whether the destination holds ev's event (a message of
// the table with ev's id, or its dead letter).
func (h *TableHoldings) Holds(ev *decode.Event) bool {
	if h == nil {
		return false
	}
	_, ok := h.ids[sink.StoredID(ev)]
	return ok
}

// Len returns how many of the table's events it holds.
func (h *TableHoldings) Len() int {
	if h == nil {
		return 0
	}
	return h.kept
}

// Read returns how many messages were read.
func (h *TableHoldings) Read() int {
	if h == nil {
		return 0
	}
	return h.read
}
