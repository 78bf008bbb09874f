package decode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/outbox-relay/outbox-relay/contract"
)

// HeadersColumnTypes are the types of a headers column the relay reads:
// json and jsonb (type OIDs 114 and 3802). A column named headers of
// another type is someone else's and is left alone.
var HeadersColumnTypes = map[string]uint32{"json": 114, "jsonb": 3802}

// Header is one message header an event carries.
type Header struct {
	Name, Value string
}

// ParseHeaders reads the headers column's JSON text: an object whose
// values are strings, at most contract.MaxHeaders of them, each name a
// valid and unreserved header name (see contract.CheckHeaderName). JSON
// null or an empty object means no headers.
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
		if err := contract.CheckHeaderName(name); err != nil {
			return nil, err
		}
		key := strings.ToLower(name)
		if seen[key] {
			return nil, fmt.Errorf("header %q appears twice", name)
		}
		seen[key] = true
		if len(hs) == contract.MaxHeaders {
			return nil, fmt.Errorf("more than %d headers", contract.MaxHeaders)
		}
		if len(value) > contract.MaxHeaderValue {
			return nil, fmt.Errorf("header %q: the value is %d bytes, over the %d allowed", name, len(value), contract.MaxHeaderValue)
		}
		if total += len(name) + len(value); total > contract.MaxHeaderBytes {
			return nil, fmt.Errorf("headers of over %d bytes", contract.MaxHeaderBytes)
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
