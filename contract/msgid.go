package contract

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
