package sink

import (
	"time"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
)

// StoredEvent is a message the relay published, as the destination holds
// it.
type StoredEvent struct {
	Seq        uint64
	Time       time.Time
	Subject    string
	ID         string
	Position   decode.Position
	DeadLetter bool
	// Reason is why a dead letter was sent there.
	Reason string
	// Source is where the message says it comes from; zero for a message
	// published by a relay older than the Outbox-Source-* headers.
	Source Source
	// AggregateType and AggregateID are the row's values, as the
	// message's headers carry them.
	AggregateType, AggregateID string
	// CreatedAt is the row's created_at as the message carries it
	// (RFC 3339), "" when it carries none.
	CreatedAt string
	// Table is the outbox table the message names (schema.table), ""
	// when it names none: a table-less event, or a message of a relay
	// older than the Outbox-Table header.
	Table string
	// RowID is a dead letter's event id as the row holds it (its
	// Outbox-Event-Id header, decoded), also one a Nats-Msg-Id cannot
	// carry; "" for other messages.
	RowID string
	// Replay says which command published the message again from the
	// table by hand (contract.HeaderReplay), "" for a relay's message.
	Replay string
}

// OneShot reports whether the message was published from the table by
// hand (verify --republish, dlq retry, replay), after messages of later
// commits:
// it has no place in its relay's commit order, so it never tells where a
// replay starts. Messages published before the Outbox-Replay header are
// recognised by what only they carry: commit LSN 0/0 with the slot's
// creation point (rows a take-up publishes from the slot's snapshot go out
// before that point is known).
func (ev StoredEvent) OneShot() bool {
	return ev.Replay != "" || (ev.Position.CommitLSN == 0 && ev.Source.Origin != 0)
}

// Copy reports whether the message is a copy `replay` republished for
// consumers that rebuild (contract.ReplayCopy): it is a OneShot too, and
// unlike the others it delivers nothing, so it holds no event of the
// table for verify, the resume logic or the identity checks (a
// republished or retried message delivers its event; a copy only repeats
// one, under another id). It is told by its marker alone: a row's own id
// may read like a copy's (contract.ReplayMsgID).
func (ev StoredEvent) Copy() bool { return ev.Replay == contract.ReplayCopy }

// StoredID returns the id under which a destination holds ev, as it is
// read back: the event's message id (ev.MsgID: its id, qualified by its
// table when the relay reads several), or for a dead letter whose id
// cannot be a message id, its WAL position. Positions are unique within
// one WAL whatever the table, and qualified ids within a stream, so no
// skip decision confuses the events of two tables. An event read from the
// table (commit LSN 0, never replayed from a slot) has no WAL position:
// its dead letter's id adds to the position what makes it unique in the
// stream (see jetstream's dead-letter ids).
func StoredID(ev *decode.Event) string {
	if contract.CheckID(ev.ID) != "" {
		return ev.Position.String()
	}
	return ev.MsgID()
}

// DeadLetterKey returns the key under which Postgres lists a dead letter
// (the relay's dead-letter records, which the dead-letter view, `dlq
// list`, `dlq retry --id` and cleanup join with the outbox rows): the
// row's id, so that they find its row, also when a Nats-Msg-Id cannot
// carry it; for an event without an id, or with one longer than its dead
// letter carries whole (contract.MaxDeadLetterValue), the id its dead
// letter is stored under (stored: the Nats-Msg-Id without its prefix),
// unique in the stream. The relay that publishes a dead letter (rowID the
// event's id) and one that finds it in the stream after a crash before
// its record (rowID its Outbox-Event-Id) key it alike. A relay of several
// tables passes the row's id qualified by its table (RowKey), as the
// tables' ids may be equal.
func DeadLetterKey(rowID, stored string) string {
	if rowID == "" || len(rowID) > contract.MaxDeadLetterValue {
		return stored
	}
	return rowID
}

// RowKey is the rowID DeadLetterKey takes for a row of table with id: the
// id, or for a relay of several tables (qualify) contract.QualifiedID of
// it, as `dlq list`, `dlq retry` and cleanup key the rows of several
// tables; "" for a row without an id.
func RowKey(table, id string, qualify bool) string {
	if id == "" || !qualify || table == "" {
		return id
	}
	return contract.QualifiedID(table, id)
}
