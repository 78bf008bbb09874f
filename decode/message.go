package decode

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/contract"
)

// Table-less events: pg_logical_emit_message(true, prefix, content) in the
// producer's transaction, decoded from pgoutput's logical decoding message
// ('M', sent when the session asks for messages 'true', Postgres 14+).
//
// The content is a JSON object, the envelope:
//
//	{"id": "…", "aggregate_type": "…", "aggregate_id": "…", "event_type": "…",
//	 "payload": <any JSON>, "created_at": "<RFC 3339>", "headers": {"…": "…"}}
//
// id, aggregate_type, aggregate_id and event_type are required strings,
// payload any JSON value (the message body, byte for byte as in the
// envelope), created_at optional (absent or null: no Outbox-Created-At),
// headers optional: the event's own headers, as in a row's headers column
// (see ParseHeaders).
// Other members are ignored, so that later versions may add some. An
// envelope that breaks these rules still becomes an Event, with Problem
// set and, when it cannot be read at all, the raw content as its payload:
// the relay dead-letters it rather than lose it.

// Option configures a Decoder.
type Option func(*Decoder)

// WithMessagePrefix makes the Decoder report transactional logical
// messages with this prefix as events (see the envelope above). Messages
// with another prefix are skipped; without this option, all are.
func WithMessagePrefix(prefix string) Option {
	return func(d *Decoder) { d.prefix = prefix }
}

// WithTables makes the Decoder report inserts into these tables as well:
// one pass over the WAL for several outbox tables. Their events carry
// their table (Event.Table) and are known in the stream by it as well as
// their id (Event.MsgID), since ids of two tables may be equal. Every
// event's position counts in one sequence per transaction, whichever
// table it came from, so positions stay unique.
func WithTables(more ...contract.Table) Option {
	return func(d *Decoder) { d.tables = append(d.tables, more...) }
}

// message decodes a logical decoding message (protocol version 1: no xid).
func (d *Decoder) message(r *reader) (Message, error) {
	flags := r.u8()
	lsn := pglogrepl.LSN(r.u64())
	prefix := r.cstring()
	n := r.u32()
	content := r.take(int(n))
	if err := r.done(); err != nil {
		return Message{}, err
	}
	transactional := flags&1 != 0
	if transactional && !d.inTxn {
		return Message{}, fmt.Errorf("transactional message at %s outside a transaction", lsn)
	}
	if d.prefix == "" || string(prefix) != d.prefix {
		return Message{Kind: KindSkip}, nil
	}
	if !transactional {
		// Written with pg_logical_emit_message(false, …): sent when written,
		// whether the writer's transaction commits or not, so it is not an
		// outbox event.
		return Message{Kind: KindIgnored, Ignored: fmt.Sprintf("non-transactional message with prefix %q", d.prefix),
			Hint: "a non-transactional logical message is not atomic with any transaction, so it is never published: write it with pg_logical_emit_message(true, ...) or outbox.Emit"}, nil
	}
	pos := Position{CommitLSN: d.commitLSN, Index: d.index}
	d.index++
	ev := envelopeEvent(content, pos)
	ev.CommitTime = d.commitTime
	return Message{Kind: KindEvent, Event: ev}, nil
}

// envelopeEvent builds the Event an envelope describes; see above.
func envelopeEvent(content []byte, pos Position) Event {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(content, &members); err != nil || members == nil {
		ev := NewEvent(Fields{ID: []byte{}, AggregateType: []byte{}, AggregateID: []byte{}, EventType: []byte{}, Payload: content}, pos)
		ev.Problem = "logical message content is not a JSON object (the outbox envelope)"
		return ev
	}
	var problems []string
	str := func(name string) []byte {
		raw, ok := members[name]
		var s *string
		if ok && json.Unmarshal(raw, &s) == nil && s != nil {
			return []byte(*s)
		}
		problems = append(problems, name+" is missing or not a string")
		return []byte{}
	}
	f := Fields{ID: str("id"), AggregateType: str("aggregate_type"), AggregateID: str("aggregate_id"), EventType: str("event_type")}
	if raw, ok := members["headers"]; ok && string(raw) != "null" {
		f.Headers = raw
	}
	f.Payload = members["payload"]
	if f.Payload == nil {
		problems = append(problems, "payload is missing")
		f.Payload = content
	}
	var created string
	if raw, ok := members["created_at"]; ok && string(raw) != "null" {
		var ok bool
		if created, ok = rfc3339UTC(raw); !ok {
			problems = append(problems, "created_at is not an RFC 3339 time")
		}
	}
	ev := NewEvent(f, pos)
	ev.CreatedAt = created
	if ev.Problem != "" {
		problems = append(problems, ev.Problem)
	}
	ev.Problem = strings.Join(problems, "; ")
	return ev
}

// rfc3339UTC reads a JSON string holding an RFC 3339 time and returns it
// in UTC, the form of Outbox-Created-At.
func rfc3339UTC(raw json.RawMessage) (string, bool) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return "", false
	}
	return t.UTC().Format(time.RFC3339Nano), true
}
