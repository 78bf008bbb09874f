package contract

import (
	"strings"
	"testing"
)

func TestCEExtension(t *testing.T) {
	for name, want := range map[string]string{
		"traceparent":           "traceparent",
		"TraceParent":           "traceparent",
		"x1":                    "x1",
		"abcdefghij0123456789":  "abcdefghij0123456789",
		"abcdefghij01234567890": "", // 21 characters
		"X-Request-Id":          "", // '-' is not allowed
		"trace_id":              "",
		"id":                    "", // a context attribute
		"Type":                  "",
		"DataContentType":       "",
		"data":                  "",
		"":                      "",
	} {
		got, ok := CEExtension(name)
		if got != want || ok != (want != "") {
			t.Errorf("CEExtension(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}

func TestCEEncode(t *testing.T) {
	for in, want := range map[string]string{
		"order.created":   "order.created",
		"Euro € 😀":        "Euro%20%E2%82%AC%20%F0%9F%98%80", // the binding's own example
		`say "hi" 100%`:   "say%20%22hi%22%20100%25",
		"tab\there\r\n":   "tab%09here%0D%0A",
		"\x7f":            "%7F",
		"/postgres/a%2Fb": "/postgres/a%252Fb",
		"":                "",
	} {
		if got := CEEncode(in); got != want {
			t.Errorf("CEEncode(%q) = %q, want %q", in, got, want)
		}
		back, err := CEDecode(CEEncode(in))
		if err != nil || back != in {
			t.Errorf("CEDecode(CEEncode(%q)) = %q, %v", in, back, err)
		}
	}
	if got := CEEncode(strings.Repeat("é", 2000)); len(got) != 2000*6 {
		t.Errorf("a long value encodes to %d bytes, want %d", len(got), 2000*6)
	}
}

func TestCEDecode(t *testing.T) {
	for in, want := range map[string]string{
		"%e2%82%ac":      "€", // lower-case hex accepted
		"%41BC":          "ABC",
		`"a b"`:          "a b", // older senders quoted instead of encoding
		`"a \"q\" \\ b"`: `a "q" \ b`,
		`"%20"`:          " ",
	} {
		if got, err := CEDecode(in); err != nil || got != want {
			t.Errorf("CEDecode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"%", "%4", "%zz", "%C0%A0", "%FF", "a%E2%82"} {
		if got, err := CEDecode(in); err == nil {
			t.Errorf("CEDecode(%q) = %q, want an error", in, got)
		}
	}
}
