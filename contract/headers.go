package contract

import (
	"fmt"
	"strings"
)

// Bounds of an event's own headers: together with the relay's headers
// they stay far below JetStream's 64 KiB header limit, also when every
// byte is percent-encoded, so that the event, or at worst its dead letter,
// can always be stored.
const (
	// MaxHeaders is the most headers an event may carry.
	MaxHeaders = 32
	// MaxHeaderValue is the most bytes of one header value.
	MaxHeaderValue = 4 << 10
	// MaxHeaderBytes is the most bytes of all names and values of an
	// event's headers.
	MaxHeaderBytes = 12 << 10
)

// reservedHeaderNames are names nats.go itself interprets on a message
// (a status message's code and description).
var reservedHeaderNames = []string{"status", "description"}

// maxHeaderName is the longest header name accepted.
const maxHeaderName = 128

// reservedHeaderPrefixes are the header namespaces of NATS and of the
// relay: an event's own headers may not set them (a Nats-Msg-Id of the
// row's choosing would defeat deduplication).
var reservedHeaderPrefixes = []string{"nats-", "outbox-"}

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
