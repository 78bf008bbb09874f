package decode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ColumnHeaders is the optional outbox column of per-event message headers
// (such as traceparent): a JSON object of header names to string values.
const ColumnHeaders = "headers"

// MaxHeaders is the most headers one event may carry.
const MaxHeaders = 32

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
		if key := strings.ToLower(name); seen[key] {
			return nil, fmt.Errorf("header %q appears twice", name)
		} else {
			seen[key] = true
		}
		if len(hs) == MaxHeaders {
			return nil, fmt.Errorf("more than %d headers", MaxHeaders)
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
// (letters, digits and !#$%&'*+-.^_`|~), and the Nats- and Outbox-
// prefixes belong to NATS and to the relay.
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
