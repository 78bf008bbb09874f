package checkpoint

import (
	"context"
	"fmt"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/sink"
)

// Holdings is what the destination already holds of the events a slot
// will replay: the one answer to "is this event stored already?". It is
// read from the destination (ReadHoldings) when a replication session
// starts, once the session holds the slot, so that it cannot grow under
// it; the relay asks it about each replayed event (Holds) and records the
// dead letters it found (RecordDeadLetters).
//
// An event is held when the destination holds a message of the relay's
// table (sink.Source.SameTable: the same Postgres system and table, from
// this slot or any other that read the same WAL) at the event's position
// with the event's id (sink.StoredID): what the stream holds is decided by
// the events, not by the slot's name, so a slot resumed after another one
// streamed the table skips what that one stored. The same position with
// another id is another event (a timeline change, another writer): it is
// not held, and is published. A message of the table without a position
// (commit LSN 0/0: a row published from the table by another slot's
// take-up, a polling relay, verify --republish or dlq retry) stored in the
// tail holds its event by id alone: the id names one event of the table.
// A copy `replay` published holds nothing, whatever its id.
type Holdings struct {
	stored Stored
	// ids are the ids of the table's messages without a position.
	ids         map[string]struct{}
	deadLetters []sink.StoredEvent
	from        pglogrepl.LSN
	// qualify says the relay reads several tables: its dead letters are
	// keyed by qualified ids (sink.RowKey).
	qualify bool
}

// ReadHoldings reads what r holds, of the events of r's relay's table
// (its owner's), with commit positions at or after from: the slot's confirmed
// position, where its replay starts.
func ReadHoldings(ctx context.Context, r sink.Reader, from pglogrepl.LSN) (*Holdings, error) {
	h := &Holdings{from: from, qualify: r.Owner().Several()}
	err := r.Tail(ctx, from, func(ev sink.StoredEvent) {
		if ev.Copy() {
			return // replay's copy of an event: it holds nothing (sink.StoredEvent.Copy)
		}
		if ev.Position.CommitLSN == 0 {
			h.addID(ev.ID)
			return
		}
		h.stored.Add(ev.Position, ev.ID)
		if ev.DeadLetter {
			h.deadLetters = append(h.deadLetters, ev)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("read what the stream holds beyond the slot's position %s: %w", from, err)
	}
	return h, nil
}

func (h *Holdings) addID(id string) {
	if id == "" {
		return
	}
	if h.ids == nil {
		h.ids = map[string]struct{}{}
	}
	h.ids[id] = struct{}{}
}

// Holds reports whether the destination holds ev, and when it holds
// another event at ev's position, that event's id (other).
func (h *Holdings) Holds(ev *decode.Event) (held bool, other string) {
	if h == nil {
		return false, ""
	}
	id := sink.StoredID(ev)
	if _, ok := h.ids[id]; ok {
		return true, ""
	}
	if !h.stored.Contains(ev.Position) {
		return false, ""
	}
	if h.stored.Holds(ev.Position, id) {
		return true, ""
	}
	other, _ = h.stored.ID(ev.Position)
	return false, other
}

// Len returns how many events it holds.
func (h *Holdings) Len() int {
	if h == nil {
		return 0
	}
	return h.stored.Len() + len(h.ids)
}

// From returns the position it was read from.
func (h *Holdings) From() pglogrepl.LSN {
	if h == nil {
		return 0
	}
	return h.from
}

// RecordDeadLetters records in the relay's store the dead letters the
// destination holds beyond the slot's position. Their events are skipped
// on replay, so one whose acknowledgement arrived just before the relay
// died, before its record was written, would otherwise never be listed.
// Recording one that is listed already changes nothing (same commit: see
// Store.RecordDeadLetter). Each is keyed as the relay that published it
// keyed it (sink.DeadLetterKey): by the row's id its Outbox-Event-Id
// carries, also one a Nats-Msg-Id cannot carry; qualified by its table
// (Outbox-Table) when the relay reads several tables.
func (h *Holdings) RecordDeadLetters(ctx context.Context, store *Store) error {
	for _, ev := range h.deadLetters {
		table := ev.Table
		if table == "" {
			table = ev.Source.Table
		}
		key := sink.DeadLetterKey(sink.RowKey(table, ev.RowID, h.qualify), ev.ID)
		if key == "" {
			key = ev.Position.String()
		}
		if err := store.RecordDeadLetter(ctx, key, ev.Reason, ev.Position.CommitLSN); err != nil {
			return err
		}
	}
	return nil
}
