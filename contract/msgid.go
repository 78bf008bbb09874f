package contract

import "strings"

// CheckID reports why id cannot be a Nats-Msg-Id, or "" when it can. The
// id must reach JetStream exactly: a header would trim surrounding
// whitespace and replace line breaks, and dedup would then compare ids
// that differ from the row's.
func CheckID[T string | []byte](id T) string {
	if len(id) == 0 {
		return "id is empty"
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c == 0x7f {
			return "id contains whitespace or a control character, which a Nats-Msg-Id header cannot carry exactly"
		}
	}
	return ""
}

// DeadLetterMsgIDPrefix prefixes the Nats-Msg-Id of dead-letter messages,
// so that republishing the event later is not taken for a duplicate.
const DeadLetterMsgIDPrefix = "dead-letter:"

// DeadLetterMsgID returns the Nats-Msg-Id of the dead letter of the event
// with this id: DeadLetterMsgIDPrefix followed by id. For an id CheckID
// rejects, the relay passes the event's WAL position instead (LSN#index),
// and for such an event read from the table, which has none, its index
// followed by what makes it unique in the stream (0/0#index@instance.n).
func DeadLetterMsgID(id string) string { return DeadLetterMsgIDPrefix + id }

// QualifiedIDSeparator separates a table's name from the event id in a
// qualified id (QualifiedID).
const QualifiedIDSeparator = "/"

// QualifiedID returns the id of the event with id from table (schema.table)
// in a stream a relay of several tables writes: table/id, for example
// public.orders_outbox/42. Two tables of one relay may hold the same id
// (two bigserial columns both count from 1); their events are two
// messages and two deduplication keys, never one. A relay of one table
// keeps the plain id. Table names cannot contain the separator, so the
// first one splits a qualified id (SplitQualifiedID).
func QualifiedID(table, id string) string { return table + QualifiedIDSeparator + id }

// SplitQualifiedID splits a qualified id into its table and event id; ok
// is false when qid has no table part that could be a table's name.
func SplitQualifiedID(qid string) (table Table, id string, ok bool) {
	name, id, found := strings.Cut(qid, QualifiedIDSeparator)
	if !found {
		return Table{}, "", false
	}
	schema, tname, found := strings.Cut(name, ".")
	if !found || !identRE.MatchString(schema) || !identRE.MatchString(tname) {
		return Table{}, "", false
	}
	return Table{Schema: schema, Name: tname}, id, true
}
