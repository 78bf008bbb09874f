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
}

// StoredID returns the id under which a destination holds ev, as it is
// read back: the event's message id (ev.MsgID: its id, qualified by its
// table when the relay reads several), or for a dead letter whose id
// cannot be a message id, its WAL position. Positions are unique within
// one WAL whatever the table, and qualified ids within a stream, so no
// skip decision confuses the events of two tables.
func StoredID(ev *decode.Event) string {
	if contract.CheckID(ev.ID) != "" {
		return ev.Position.String()
	}
	return ev.MsgID()
}
