package sink

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/outbox-relay/outbox-relay/decode"
)

// Placeholders a subject template may use, each as a whole token.
const (
	PlaceholderAggregateType = "{aggregate_type}"
	PlaceholderAggregateID   = "{aggregate_id}"
	PlaceholderEventType     = "{event_type}"
	// PlaceholderSchema and PlaceholderTable are the schema and the name
	// of the outbox table the event was inserted into: what tells the
	// events of a relay of several tables apart. A table-less event (a
	// logical decoding message) has none: both render as "_", the token
	// of an empty value.
	PlaceholderSchema = "{schema}"
	PlaceholderTable  = "{table}"
)

// placeholders are the values each placeholder renders.
var placeholders = map[string]func(*decode.Event) string{
	PlaceholderAggregateType: func(e *decode.Event) string { return e.AggregateType },
	PlaceholderAggregateID:   func(e *decode.Event) string { return e.AggregateID },
	PlaceholderEventType:     func(e *decode.Event) string { return e.EventType },
	PlaceholderSchema:        func(e *decode.Event) string { s, _, _ := strings.Cut(e.Table, "."); return s },
	PlaceholderTable:         func(e *decode.Event) string { _, t, _ := strings.Cut(e.Table, "."); return t },
}

// maxTokenLen bounds one rendered token. Longer values are cut and end in
// "~" plus a hash of the whole value, so distinct values stay distinct and
// the subject stays far below the server's 4 KiB control-line limit.
const (
	maxTokenLen  = 64
	keptTokenLen = 48
	hashLen      = 12
)

// Template renders NATS subjects from outbox rows.
//
// A template is a dot-separated list of tokens. Literal tokens are fixed;
// a placeholder token ({aggregate_type}, {aggregate_id}, {event_type},
// {schema} or {table}) is rendered from the row's value: as exactly one token by EscapeToken
// (DotsEscape, the default), or as one to MaxDottedTokens tokens by
// DottedTokens (DotsTokens). The first token must be literal, so every
// subject lives under a fixed prefix whatever the rows contain.
type Template struct {
	source          string
	tokens          []templateToken
	usesAggregateID bool
	dots            Dots
}

// TemplateOption changes how a Template renders.
type TemplateOption func(*Template)

// WithDots sets how a placeholder renders a value that contains dots.
func WithDots(d Dots) TemplateOption { return func(t *Template) { t.dots = d } }

type templateToken struct {
	literal string
	field   func(*decode.Event) string // nil for a literal token
}

// ParseTemplate parses and validates a subject template.
func ParseTemplate(s string, opts ...TemplateOption) (Template, error) {
	fields := placeholders
	t := Template{source: s}
	for i, tok := range strings.Split(s, ".") {
		if f, ok := fields[tok]; ok {
			t.usesAggregateID = t.usesAggregateID || tok == PlaceholderAggregateID
			if i == 0 {
				return Template{}, fmt.Errorf("subject template %q: the first token must be a fixed prefix, not a placeholder", s)
			}
			t.tokens = append(t.tokens, templateToken{field: f})
			continue
		}
		if strings.ContainsAny(tok, "{}") {
			return Template{}, fmt.Errorf("subject template %q: token %q: placeholders are %s, %s, %s, %s and %s, each a whole token",
				s, tok, PlaceholderAggregateType, PlaceholderAggregateID, PlaceholderEventType, PlaceholderSchema, PlaceholderTable)
		}
		if err := checkLiteralToken(tok); err != nil {
			return Template{}, fmt.Errorf("subject template %q: %w", s, err)
		}
		t.tokens = append(t.tokens, templateToken{literal: tok})
	}
	for _, o := range opts {
		o(&t)
	}
	return t, nil
}

func checkLiteralToken(tok string) error {
	if tok == "" {
		return fmt.Errorf("empty token")
	}
	if strings.ContainsAny(tok, "*> \t\r\n") {
		return fmt.Errorf("token %q: wildcards and whitespace are not allowed", tok)
	}
	return nil
}

// String returns the template as written.
func (t Template) String() string { return t.source }

// Dots returns how the template renders dotted values.
func (t Template) Dots() Dots { return t.dots }

// Filter returns the subject filter matching every subject the template
// can render. With DotsEscape each placeholder is one token and becomes
// "*" (outbox.*.*). With DotsTokens a placeholder spans one or more
// tokens, so the filter keeps the literal tokens before the first
// placeholder, then one "*" for each token after it but the last, which
// becomes ">" (outbox.*.>): every rendered subject has at least that
// many tokens, and literals after a placeholder no longer sit at a fixed
// position.
func (t Template) Filter() string {
	parts := make([]string, len(t.tokens))
	first := -1
	for i, tok := range t.tokens {
		if tok.field != nil {
			parts[i] = "*"
			if first < 0 {
				first = i
			}
		} else {
			parts[i] = tok.literal
		}
	}
	if t.dots == DotsTokens && first >= 0 {
		for i := first; i < len(parts)-1; i++ {
			parts[i] = "*"
		}
		parts[len(parts)-1] = ">"
	}
	return strings.Join(parts, ".")
}

// Render returns the subject for ev.
func (t Template) Render(ev *decode.Event) string {
	var b strings.Builder
	for i, tok := range t.tokens {
		if i > 0 {
			b.WriteByte('.')
		}
		switch {
		case tok.field == nil:
			b.WriteString(tok.literal)
		case t.dots == DotsTokens:
			writeDotted(&b, tok.field(ev))
		default:
			writeToken(&b, tok.field(ev))
		}
	}
	return b.String()
}

// EscapeToken renders a row value as one subject token:
//   - the bytes A–Z, a–z, 0–9, '-' and '_' stay as they are;
//   - every other byte (including '.', '*', '>', whitespace, '%' and each
//     byte of a non-ASCII character) becomes %XX, its value in upper-case hex;
//   - an empty value becomes "_";
//   - a result longer than 64 bytes keeps its first 48 bytes (never cutting
//     an %XX) and ends in "~" and 12 hex digits of the value's SHA-256.
//
// The result is never empty and never contains '.', '*', '>' or whitespace,
// so a value cannot change the shape of the subject.
func EscapeToken(v string) string {
	var b strings.Builder
	writeToken(&b, v)
	return b.String()
}

func writeToken(b *strings.Builder, v string) {
	if v == "" {
		b.WriteByte('_')
		return
	}
	n := escapedLen(v)
	if n == len(v) && n <= maxTokenLen {
		b.WriteString(v)
		return
	}
	limit := n
	if n > maxTokenLen {
		limit = keptTokenLen
	}
	const hexDigits = "0123456789ABCDEF"
	written := 0
	for i := 0; i < len(v); i++ {
		c := v[i]
		if isPlainByte(c) {
			if written+1 > limit {
				break
			}
			b.WriteByte(c)
			written++
			continue
		}
		if written+3 > limit {
			break
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0x0f])
		written += 3
	}
	if n > maxTokenLen {
		sum := sha256.Sum256([]byte(v))
		b.WriteByte('~')
		b.WriteString(hex.EncodeToString(sum[:])[:hashLen])
	}
}

func escapedLen(v string) int {
	n := 0
	for i := 0; i < len(v); i++ {
		if isPlainByte(v[i]) {
			n++
		} else {
			n += 3
		}
	}
	return n
}

func isPlainByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// Covers reports whether the stream subject filter covers every subject
// matching pattern (a subject whose tokens may be "*", and whose last
// token may be ">": one or more tokens).
func Covers(filter, pattern string) bool {
	f := strings.Split(filter, ".")
	p := strings.Split(pattern, ".")
	for i, tok := range f {
		if tok == ">" {
			return len(p) > i
		}
		if i >= len(p) {
			return false
		}
		switch {
		case p[i] == ">":
			return false // the pattern goes on with any number of tokens; tok matches one
		case tok == "*":
		case tok != p[i]:
			return false
		}
	}
	return len(f) == len(p)
}

// CheckSubject validates a literal subject such as the dead-letter subject.
func CheckSubject(s string) error {
	for _, tok := range strings.Split(s, ".") {
		if err := checkLiteralToken(tok); err != nil {
			return fmt.Errorf("subject %q: %w", s, err)
		}
	}
	return nil
}
