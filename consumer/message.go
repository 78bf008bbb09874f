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
	// the relay's Outbox-* headers (percent-decoding undone), which both of
	// the relay's forms carry. A CloudEvent without them (another
	// producer's) gives its subject and type as AggregateID and EventType.
	AggregateType string
	AggregateID   string
	EventType     string
	Subject       string
	// Data is the body: the row's payload (jsonb text).
	Data   []byte
	Header nats.Header
	// CloudEvent holds the CloudEvents attributes of a message in that
	// form (relay --format cloudevents, or any producer following the
	// binary mode of the CloudEvents NATS binding), decoded from its ce-
	// headers and keyed by name: id, source, type, subject, time,
	// datacontenttype, and the extensions (the event's own headers that
	// became one). A value the binding's decoding refuses is left out.
	// Nil for a message in the relay's own form.
	CloudEvent map[string]string
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
			return contract.PercentDecode(v)
		}
		return v
	}
	m := &Message{
		ID:            h.Get(contract.HeaderMsgID),
		Table:         h.Get(contract.HeaderTable),
		AggregateType: value(contract.HeaderAggregateType),
		AggregateID:   value(contract.HeaderAggregateID),
		EventType:     value(contract.HeaderEventType),
		Subject:       jm.Subject(),
		Data:          jm.Data(),
		Header:        h,
		CloudEvent:    cloudEvent(h),
		Stream:        meta.Stream,
		StreamSeq:     meta.Sequence.Stream,
		Delivered:     meta.NumDelivered,
	}
	if m.CloudEvent != nil {
		if len(h.Values(contract.HeaderAggregateID)) == 0 {
			m.AggregateID = m.CloudEvent["subject"]
		}
		if len(h.Values(contract.HeaderEventType)) == 0 {
			m.EventType = m.CloudEvent["type"]
		}
	}
	return m, nil
}

// cloudEvent reads the CloudEvents attributes of h, nil when it has none
// (no ce-specversion: the binding's binary mode always has it). Header
// names are case-insensitive in NATS.
func cloudEvent(h nats.Header) map[string]string {
	var attrs map[string]string
	for k, vs := range h {
		name, ok := cutPrefixFold(k, contract.CEPrefix)
		if !ok || len(vs) == 0 || name == "" {
			continue
		}
		v, err := contract.CEDecode(vs[0])
		if err != nil {
			continue
		}
		if attrs == nil {
			attrs = map[string]string{}
		}
		attrs[strings.ToLower(name)] = v
	}
	if attrs["specversion"] == "" {
		return nil
	}
	return attrs
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return s, false
	}
	return s[len(prefix):], true
}

// recordID is the id a message is recorded under: its Nats-Msg-Id, or its
// place in the stream when it has none.
func (m *Message) recordID() string {
	if m.ID != "" {
		return m.ID
	}
	return m.Stream + ":" + strconv.FormatUint(m.StreamSeq, 10)
}
