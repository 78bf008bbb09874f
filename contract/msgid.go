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
