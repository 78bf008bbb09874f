package decode

import (
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/contract"
)

// Position orders events: the commit LSN of their transaction, then their
// index among that transaction's outbox inserts. Transactions reach the
// relay in commit order and commit LSNs grow, so positions grow strictly in
// the order events must be published. Rows published from the table at the
// slot's creation (before any streamed transaction) have CommitLSN 0.
type Position struct {
	CommitLSN pglogrepl.LSN
	Index     uint32
}

// Less reports whether p comes before q.
func (p Position) Less(q Position) bool {
	if p.CommitLSN != q.CommitLSN {
		return p.CommitLSN < q.CommitLSN
	}
	return p.Index < q.Index
}

func (p Position) String() string { return fmt.Sprintf("%s#%d", p.CommitLSN, p.Index) }

// Event is one outbox row of a committed transaction.
//
// The strings and Payload share one allocation that the Event owns: it
// never aliases the replication receive buffer.
type Event struct {
	ID            string
	AggregateType string
	AggregateID   string
	EventType     string
	// Payload is the payload column's text (JSON for json/jsonb), or the raw
	// bytes of a bytea column.
	Payload []byte
	// Binary says Payload holds a bytea column's bytes rather than JSON
	// text (a CloudEvent then declares them application/octet-stream).
	Binary bool
	// CreatedAt is created_at in RFC 3339, UTC; empty when the table has no
	// created_at column.
	CreatedAt string
	// Headers are the event's own message headers (the headers column),
	// nil when it has none.
	Headers []Header
	// Table is the outbox table the row was inserted into, schema.table;
	// "" for a table-less event (a logical decoding message).
	Table string
	// QualifyID says the event's id is known in the stream by its table
	// too (MsgID): set when the relay reads several tables, whose ids may
	// collide.
	QualifyID bool
	Position  Position
	// CommitTime is when the event's transaction committed, by the Postgres
	// server's clock (the commit timestamp of the transaction's BEGIN
	// message); zero when unknown (rows read from the table rather than
	// the WAL). The relay measures commit-to-stored latency from it.
	CommitTime time.Time
	// Problem says why the row cannot be published as an ordinary message
	// (a NULL column, an id that cannot be a Nats-Msg-Id); empty when it can.
	Problem string
}

// MsgID returns the event's id in the stream, its Nats-Msg-Id: ID, or
// for an event of a relay of several tables (QualifyID)
// contract.QualifiedID(Table, ID), so that equal ids in two tables stay
// two events. An event whose ID cannot be a message id (Problem) keeps
// that ID here too; the destination replaces it (see sink.StoredID).
func (e *Event) MsgID() string {
	if !e.QualifyID || e.Table == "" {
		return e.ID
	}
	return contract.QualifiedID(e.Table, e.ID)
}

// Fields holds one row's column values as text, the way both the WAL and a
// SELECT deliver them. A nil slice is SQL NULL; an empty string is a
// non-nil empty slice.
type Fields struct {
	ID, AggregateType, AggregateID, EventType, Payload, CreatedAt []byte
	// Headers is the headers column's JSON text; nil when NULL or absent.
	Headers []byte
	// PayloadIsBytea says Payload is bytea text output (\x followed by hex).
	PayloadIsBytea bool
	// HasCreatedAt says the table has a created_at column.
	HasCreatedAt bool
}

// NewEvent builds an Event from column text, copying it into one buffer.
// Values that make the row unpublishable are reported in Event.Problem.
func NewEvent(f Fields, pos Position) Event {
	ev := Event{Position: pos, Binary: f.PayloadIsBytea}
	var problems []string
	need := func(name string, v []byte) []byte {
		if v == nil {
			problems = append(problems, name+" is NULL")
		}
		return v
	}
	id := need("id", f.ID)
	at := need("aggregate_type", f.AggregateType)
	aid := need("aggregate_id", f.AggregateID)
	et := need("event_type", f.EventType)
	payload := need("payload", f.Payload)
	var createdBuf [64]byte
	var created []byte
	if f.HasCreatedAt && f.CreatedAt != nil {
		created = appendTimestamp(createdBuf[:0], f.CreatedAt)
	}
	if f.PayloadIsBytea && payload != nil {
		decoded, err := decodeByteaHex(payload)
		if err != nil {
			problems = append(problems, "payload: "+err.Error())
		}
		payload = decoded
	}
	if id != nil {
		if problem := contract.CheckID(id); problem != "" {
			problems = append(problems, problem)
		}
	}
	if f.Headers != nil {
		hs, err := ParseHeaders(f.Headers)
		if err != nil {
			problems = append(problems, "headers: "+err.Error())
		}
		ev.Headers = hs
	}

	buf := make([]byte, 0, len(id)+len(at)+len(aid)+len(et)+len(created)+len(payload))
	ev.ID, buf = appendString(buf, id)
	ev.AggregateType, buf = appendString(buf, at)
	ev.AggregateID, buf = appendString(buf, aid)
	ev.EventType, buf = appendString(buf, et)
	ev.CreatedAt, buf = appendString(buf, created)
	start := len(buf)
	buf = append(buf, payload...)
	ev.Payload = buf[start:len(buf):len(buf)]
	if len(problems) > 0 {
		ev.Problem = strings.Join(problems, "; ")
	}
	return ev
}

// appendString copies v into buf and returns a string viewing the copy.
// buf has the capacity for every field, so it never moves.
func appendString(buf, v []byte) (string, []byte) {
	if len(v) == 0 {
		return "", buf
	}
	start := len(buf)
	buf = append(buf, v...)
	return unsafeString(buf[start:]), buf
}
