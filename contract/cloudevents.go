package contract

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// CloudEvents in binary content mode, as the NATS protocol binding on the
// CloudEvents spec's main branch defines it
// (cloudevents/bindings/nats-protocol-binding.md, "1.0.3-wip"): one NATS
// header per attribute, named after the attribute with the prefix "ce-"
// (datacontenttype too, as ce-datacontenttype: unlike HTTP and Kafka, the
// NATS binding has no Content-Type mapping), the event's data as the body.
// The v1.0.x releases of the binding predate NATS headers and allowed only
// structured mode.
const (
	// CEPrefix starts the name of every CloudEvents attribute header.
	CEPrefix = "ce-"
	// CESpecVersion is the value of HeaderCESpecVersion.
	CESpecVersion = "1.0"

	HeaderCESpecVersion     = "ce-specversion"
	HeaderCEID              = "ce-id"
	HeaderCESource          = "ce-source"
	HeaderCEType            = "ce-type"
	HeaderCESubject         = "ce-subject"
	HeaderCETime            = "ce-time"
	HeaderCEDataContentType = "ce-datacontenttype"
)

// MaxCEExtensionName is the longest extension attribute name the
// CloudEvents spec allows.
const MaxCEExtensionName = 20

// ceContextAttributes are the names the CloudEvents spec gives its own
// context attributes (and "data", reserved by the JSON format): an event's
// own header never becomes one of them.
var ceContextAttributes = []string{"specversion", "id", "source", "type", "subject", "time",
	"datacontenttype", "dataschema", "data"}

// CEExtension returns the CloudEvents extension attribute an event's own
// header called name becomes: the name in lower case, when that is 1 to 20
// ASCII letters and digits and not the name of a context attribute; ok is
// false otherwise (the header then is no extension).
func CEExtension(name string) (attr string, ok bool) {
	if name == "" || len(name) > MaxCEExtensionName {
		return "", false
	}
	attr = strings.ToLower(name)
	for i := 0; i < len(attr); i++ {
		if c := attr[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return "", false
		}
	}
	for _, a := range ceContextAttributes {
		if attr == a {
			return "", false
		}
	}
	return attr, true
}

// CEEncode percent-encodes an attribute value for its NATS header, as the
// binding requires of every string value: space, '"', '%' and each byte
// outside printable ASCII (so each byte of a non-ASCII character's UTF-8
// form) become %XX in upper-case hex.
func CEEncode(v string) string {
	const hexDigits = "0123456789ABCDEF"
	n := 0
	for i := 0; i < len(v); i++ {
		if ceEscaped(v[i]) {
			n++
		}
	}
	if n == 0 {
		return v
	}
	b := make([]byte, 0, len(v)+2*n)
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !ceEscaped(c) {
			b = append(b, c)
			continue
		}
		b = append(b, '%', hexDigits[c>>4], hexDigits[c&0x0f])
	}
	return string(b)
}

func ceEscaped(c byte) bool { return c <= ' ' || c >= 0x7f || c == '"' || c == '%' }

// CEDecode reads an attribute value from its NATS header, as the binding
// says a receiver must: a double-quoted value is unquoted first
// (backslash escapes included), then one round of percent-decoding,
// lower-case hex accepted. A malformed escape, and bytes that are not
// UTF-8, are errors.
func CEDecode(v string) (string, error) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = unquote(v[1 : len(v)-1])
	}
	if !strings.Contains(v, "%") {
		if !utf8.ValidString(v) {
			return "", errors.New("not UTF-8")
		}
		return v, nil
	}
	b := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		if v[i] != '%' {
			b = append(b, v[i])
			continue
		}
		if i+2 >= len(v) || unhex(v[i+1]) < 0 || unhex(v[i+2]) < 0 {
			return "", fmt.Errorf("malformed percent escape at byte %d", i)
		}
		b = append(b, byte(unhex(v[i+1])<<4|unhex(v[i+2])))
		i += 2
	}
	if !utf8.Valid(b) {
		return "", errors.New("percent-encoded bytes are not UTF-8")
	}
	return string(b), nil
}

// unquote undoes the backslash escapes of an RFC 7230 quoted-string's
// content.
func unquote(v string) string {
	if !strings.Contains(v, `\`) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
