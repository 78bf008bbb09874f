package consumer

import (
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
)

// Message is the delivery a Handler gets.
type Message struct {
	// ID is the Nats-Msg-Id: the outbox row's id, the key in
	// processed_events. A relay of several outbox tables qualifies it by
	// the row's table (schema.table/id, see contract.QualifiedID), so
	// that equal ids of two tables are two events here too.
	ID string
	// Table is the outbox table the event was inserted into
	// (Outbox-Table, schema.table); "" for a table-less event or a
	// message of a relay older than the header.
	Table string
	// AggregateType, AggregateID and EventType are the row's values, from
	// the relay's Outbox-* headers (percent-decoding undone).
	AggregateType string
	AggregateID   string
	EventType     string
	Subject       string
	// Data is the body: the row's payload (jsonb text).
	Data   []byte
	Header nats.Header
	// Stream and StreamSeq locate the message in its stream.
	Stream    string
	StreamSeq uint64
	// Delivered is how many times the message has been delivered, 1 the
	// first time.
	Delivered uint64
}

// newMessage reads jm. It fails only for a message that is not a
// JetStream delivery.
func newMessage(jm jetstream.Msg) (*Message, error) {
	meta, err := jm.Metadata()
	if err != nil {
		return nil, err
	}
	h := jm.Headers()
	encoded := map[string]bool{}
	for _, name := range strings.Split(h.Get(contract.HeaderPercentEncoded), ",") {
		encoded[strings.TrimSpace(name)] = true
	}
	value := func(key string) string {
		v := h.Get(key)
		if encoded[key] {
			return percentDecode(v)
		}
		return v
	}
	return &Message{
		ID:            h.Get(contract.HeaderMsgID),
		Table:         h.Get(contract.HeaderTable),
		AggregateType: value(contract.HeaderAggregateType),
		AggregateID:   value(contract.HeaderAggregateID),
		EventType:     value(contract.HeaderEventType),
		Subject:       jm.Subject(),
		Data:          jm.Data(),
		Header:        h,
		Stream:        meta.Stream,
		StreamSeq:     meta.Sequence.Stream,
		Delivered:     meta.NumDelivered,
	}, nil
}

// percentDecode undoes the relay's encoding of header values (%XX).
// Malformed escapes are kept as they are.
func percentDecode(v string) string {
	if !strings.Contains(v, "%") {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '%' && i+2 < len(v) {
			if n, err := strconv.ParseUint(v[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(n))
				i += 2
				continue
			}
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// recordID is the id a message is recorded under: its Nats-Msg-Id, or its
// place in the stream when it has none.
func (m *Message) recordID() string {
	if m.ID != "" {
		return m.ID
	}
	return m.Stream + ":" + strconv.FormatUint(m.StreamSeq, 10)
}
