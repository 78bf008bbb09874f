package outbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/outbox-relay/outbox-relay/contract"
)

// Event is one outbox row to write.
type Event struct {
	// AggregateType and AggregateID name the entity the event belongs to
	// (the seed's "order" and the order's id); the relay keeps the events
	// of one aggregate in order. EventType is the name consumers expect
	// ("order.created"). All three are required, at most MaxFieldLength
	// characters each.
	AggregateType string
	AggregateID   string
	EventType     string
	// Payload is the message body. []byte and json.RawMessage are taken
	// as JSON text and checked; any other value (a struct, a map, a
	// string) is encoded with encoding/json. Nil is refused: write
	// json.RawMessage("null") or "{}" if an empty body is meant.
	Payload any
	// Headers are message headers of the event's own, such as traceparent
	// and tracestate: at most contract.MaxHeaders, names that are HTTP
	// tokens outside the Nats- and Outbox- prefixes (see
	// contract.CheckHeaderName), values valid UTF-8 without NUL. They are
	// written to the table's headers column (migration 00006), which
	// Write uses only when some event of the call has headers.
	Headers map[string]string
}

// MaxFieldLength is the longest AggregateType, AggregateID or EventType in
// characters: the varchar(100) of the seed's schema.
const MaxFieldLength = 100

// Errors a Write returns for input it refuses before sending anything;
// compare with errors.Is.
var (
	// ErrInvalidEvent: an aggregate type, aggregate id or event type that
	// is empty, too long, not UTF-8 or holds a NUL byte.
	ErrInvalidEvent = errors.New("invalid outbox event")
	// ErrInvalidPayload: a payload that is nil, cannot be encoded, is not
	// JSON, or is JSON that Postgres's jsonb refuses.
	ErrInvalidPayload = errors.New("invalid outbox payload")
	// ErrPayloadTooLarge: a payload that, as the relay publishes it, would
	// not fit in the configured maximum message size.
	ErrPayloadTooLarge = errors.New("outbox payload too large")
)

// row is a validated event, ready for the statement.
type row struct {
	aggregateType, aggregateID, eventType string
	payload                               string
	headers                               string // JSON object, "" for none
}

// prepare checks ev (the index-th event of the call) and returns its row.
func prepare(index int, ev Event, maxMessage int) (row, error) {
	fields := [...]struct{ name, value string }{
		{"aggregate_type", ev.AggregateType},
		{"aggregate_id", ev.AggregateID},
		{"event_type", ev.EventType},
	}
	headerBytes := headerReserve
	for _, f := range fields {
		if err := checkField(f.value); err != nil {
			return row{}, fmt.Errorf("outbox event %d: %s %w: %w", index, f.name, err, ErrInvalidEvent)
		}
		headerBytes += 3 * len(f.value) // a header value percent-encoded at worst
	}
	headers, own, err := headersText(ev.Headers)
	if err != nil {
		return row{}, fmt.Errorf("outbox event %d (%s): %w: %w", index, ev.EventType, err, ErrInvalidEvent)
	}
	headerBytes += own
	text, err := payloadText(ev.Payload)
	if err != nil {
		return row{}, fmt.Errorf("outbox event %d (%s): payload %w: %w", index, ev.EventType, err, ErrInvalidPayload)
	}
	size, err := jsonbSize(text)
	if err != nil {
		return row{}, fmt.Errorf("outbox event %d (%s): payload %w: %w", index, ev.EventType, err, ErrInvalidPayload)
	}
	if size+headerBytes > maxMessage {
		return row{}, fmt.Errorf("outbox event %d (%s): payload is %d bytes as published (jsonb text form) and the relay's headers up to %d more, over the maximum message size of %d bytes: %w",
			index, ev.EventType, size, headerBytes, maxMessage, ErrPayloadTooLarge)
	}
	return row{ev.AggregateType, ev.AggregateID, ev.EventType, string(text), headers}, nil
}

// headerReserve is room for the headers the relay adds to every message
// besides the three row values (Nats-Msg-Id, Outbox-Created-At,
// Outbox-Commit-Lsn, Outbox-Txn-Index, Outbox-Percent-Encoded: about 350
// bytes today), with a margin for headers to come.
const headerReserve = 1024

func checkField(v string) error {
	switch {
	case v == "":
		return errors.New("is empty")
	case !utf8.ValidString(v):
		return errors.New("is not valid UTF-8")
	case strings.IndexByte(v, 0) >= 0:
		return errors.New("contains a NUL byte, which Postgres text cannot hold")
	case utf8.RuneCountInString(v) > MaxFieldLength:
		return fmt.Errorf("is %d characters long, over the column's %d", utf8.RuneCountInString(v), MaxFieldLength)
	}
	return nil
}

// headersText checks an event's own headers and returns them as a JSON
// object ("" for none) with the most bytes they add to the message.
func headersText(hs map[string]string) (string, int, error) {
	if len(hs) == 0 {
		return "", 0, nil
	}
	if len(hs) > contract.MaxHeaders {
		return "", 0, fmt.Errorf("%d headers, over the %d allowed", len(hs), contract.MaxHeaders)
	}
	size, total := 0, 0
	seen := make(map[string]string, len(hs))
	for name, value := range hs {
		if err := contract.CheckHeaderName(name); err != nil {
			return "", 0, err
		}
		if other, dup := seen[strings.ToLower(name)]; dup {
			return "", 0, fmt.Errorf("headers %q and %q differ only in case", other, name)
		}
		seen[strings.ToLower(name)] = name
		if !utf8.ValidString(value) || strings.IndexByte(value, 0) >= 0 {
			return "", 0, fmt.Errorf("header %q: the value must be valid UTF-8 without NUL bytes", name)
		}
		if len(value) > contract.MaxHeaderValue {
			return "", 0, fmt.Errorf("header %q: the value is %d bytes, over the %d allowed", name, len(value), contract.MaxHeaderValue)
		}
		if total += len(name) + len(value); total > contract.MaxHeaderBytes {
			return "", 0, fmt.Errorf("headers of over %d bytes", contract.MaxHeaderBytes)
		}
		// A value percent-encoded at worst, and its name in the list of
		// encoded headers.
		size += len(name) + len(": \r\n") + 3*len(value) + len(name) + 1
	}
	b, err := json.Marshal(hs)
	if err != nil {
		return "", 0, fmt.Errorf("encode headers: %w", err)
	}
	return string(b), size, nil
}

// payloadText returns the payload as JSON text.
func payloadText(p any) ([]byte, error) {
	var text []byte
	switch v := p.(type) {
	case nil:
		return nil, errors.New("is nil (use json.RawMessage(\"null\") or \"{}\" for an empty body)")
	case json.RawMessage:
		text = v
	case []byte:
		text = v
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("cannot be encoded as JSON: %w", err)
		}
		return b, nil
	}
	if !utf8.Valid(text) {
		return nil, errors.New("is not valid UTF-8")
	}
	if !json.Valid(text) {
		if len(text) == 0 {
			return nil, errors.New("is empty, which is not JSON")
		}
		var syntax *json.SyntaxError
		if err := json.Unmarshal(text, new(json.RawMessage)); errors.As(err, &syntax) {
			return nil, fmt.Errorf("is not JSON: %v at byte %d", syntax, syntax.Offset)
		}
		return nil, errors.New("is not JSON")
	}
	return text, nil
}
