package sink

import (
	"fmt"
	"strings"
)

// Dots says how a placeholder renders a row value that contains dots.
type Dots int

const (
	// DotsEscape renders every value as one token: its dots become %2E
	// (order.created gives outbox.order.order%2Ecreated). The default:
	// the subjects of relays before --subject-dots existed.
	DotsEscape Dots = iota
	// DotsTokens renders a dotted value as several tokens (order.created
	// gives outbox.order.order.created), see DottedTokens.
	DotsTokens
)

// MaxDottedTokens bounds the tokens one value may become with DotsTokens;
// a value with more parts is rendered as one escaped token. Eight parts of
// at most 64 bytes keep three placeholders far below the 4 KiB subject
// limit, and no event naming scheme we know of nests deeper.
const MaxDottedTokens = 8

// ParseDots parses the --subject-dots values "escape" and "tokens".
func ParseDots(s string) (Dots, error) {
	switch s {
	case "escape", "":
		return DotsEscape, nil
	case "tokens":
		return DotsTokens, nil
	}
	return DotsEscape, fmt.Errorf("subject dots %q: want escape or tokens", s)
}

// String returns the name ParseDots accepts.
func (d Dots) String() string {
	if d == DotsTokens {
		return "tokens"
	}
	return "escape"
}

// DottedTokens renders a row value as subject tokens, joined by dots:
//   - a value of one to MaxDottedTokens non-empty dot-separated parts
//     becomes one token per part, each part rendered by EscapeToken
//     (order.created gives order.created; order.* gives order.%2A);
//   - any other value (empty, with an empty part as in a..b, .a or a.,
//     or with more than MaxDottedTokens parts) becomes the single token
//     EscapeToken renders, its dots as %2E.
//
// No token of the result is empty or holds a wildcard or whitespace, and
// the result has at most MaxDottedTokens tokens, so a value adds tokens to
// the subject but never changes the fixed prefix or what a wildcard
// filter matches. Rendering is not one-to-one across placeholders:
// aggregate type a.b with event type c gives the subject of a with b.c;
// the Outbox-* headers carry the raw values.
func DottedTokens(v string) string {
	var b strings.Builder
	writeDotted(&b, v)
	return b.String()
}

func writeDotted(b *strings.Builder, v string) {
	if !splittable(v) {
		writeToken(b, v)
		return
	}
	for i, part := range strings.Split(v, ".") {
		if i > 0 {
			b.WriteByte('.')
		}
		writeToken(b, part)
	}
}

// splittable reports whether v has 1 to MaxDottedTokens parts, none empty.
func splittable(v string) bool {
	if v == "" || v[0] == '.' || v[len(v)-1] == '.' || strings.Contains(v, "..") {
		return false
	}
	return strings.Count(v, ".") < MaxDottedTokens
}
