package decode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Bounds of an event's own headers: together with the relay's headers
// they stay far below JetStream's 64 KiB header limit, also when every
// byte is percent-encoded, so that the event, or at worst its dead letter,
// can always be stored.
const (
	MaxHeaders     = 32       // headers per event
	MaxHeaderValue = 4 << 10  // bytes per value
	MaxHeaderBytes = 12 << 10 // bytes of all names and values of an event
)

// HeadersColumnTypes are the types of a headers column the relay reads:
// json and jsonb (type OIDs 114 and 3802). A column named headers of
// another type is someone else's and is left alone.
var HeadersColumnTypes = map[string]uint32{"json": 114, "jsonb": 3802}

// reservedHeaderNames are names nats.go itself interprets on a message
// (a status message's code and description).
var reservedHeaderNames = []string{"status", "description"}

// maxHeaderName is the longest header name accepted.
const maxHeaderName = 128

// reservedHeaderPrefixes are the header namespaces of NATS and of the
// relay: an event's own headers may not set them (a Nats-Msg-Id of the
// row's choosing would defeat deduplication).
var reservedHeaderPrefixes = []string{"nats-", "outbox-"}

// Header is one message header an event carries.
type Header struct {
	Name, Value string
}

// ParseHeaders reads the headers column's JSON text: an object whose
// values are strings, at most MaxHeaders of them, each name a valid and
// unreserved header name (see CheckHeaderName). JSON null or an empty
// object means no headers.
func ParseHeaders(text []byte) ([]Header, error) {
	dec := json.NewDecoder(bytes.NewReader(text))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if tok == nil {
		return nil, nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object of header names to string values")
	}
	var hs []Header
	seen := map[string]bool{}
	total := 0
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("not JSON: %w", err)
		}
		name := tok.(string) // object keys are always strings
		var raw json.RawMessage
		var value string
		if err := dec.Decode(&raw); err != nil || len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &value) != nil {
			return nil, fmt.Errorf("header %q: the value must be a JSON string", name)
		}
		if err := CheckHeaderName(name); err != nil {
			return nil, err
		}
		key := strings.ToLower(name)
		if seen[key] {
			return nil, fmt.Errorf("header %q appears twice", name)
		}
		seen[key] = true
		if len(hs) == MaxHeaders {
			return nil, fmt.Errorf("more than %d headers", MaxHeaders)
		}
		if len(value) > MaxHeaderValue {
			return nil, fmt.Errorf("header %q: the value is %d bytes, over the %d allowed", name, len(value), MaxHeaderValue)
		}
		if total += len(name) + len(value); total > MaxHeaderBytes {
			return nil, fmt.Errorf("headers of over %d bytes", MaxHeaderBytes)
		}
		hs = append(hs, Header{Name: name, Value: value})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("not JSON: text after the object")
	}
	return hs, nil
}

// CheckHeaderName says why name cannot be the name of an event's own
// header: a header name is 1 to 128 characters of an HTTP token
// (letters, digits and !#$%&'*+-.^_`|~); the Nats- and Outbox- prefixes
// belong to NATS and to the relay, Status and Description to NATS
// clients.
func CheckHeaderName(name string) error {
	if name == "" || len(name) > maxHeaderName {
		return fmt.Errorf("header name %q: want 1 to %d characters", name, maxHeaderName)
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return fmt.Errorf("header name %q: %q is not allowed in a header name (letters, digits and !#$%%&'*+-.^_`|~)", name, name[i])
		}
	}
	lower := strings.ToLower(name)
	for _, r := range reservedHeaderNames {
		if lower == r {
			return fmt.Errorf("header name %q is reserved: NATS clients read it as a status message's", name)
		}
	}
	for _, p := range reservedHeaderPrefixes {
		if strings.HasPrefix(lower, p) {
			return fmt.Errorf("header name %q: names starting with %q are reserved for NATS and the relay", name, name[:len(p)])
		}
	}
	return nil
}

func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
