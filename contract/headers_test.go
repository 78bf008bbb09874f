package contract

import (
	"strings"
	"testing"
)

func TestCheckHeaderName(t *testing.T) {
	for _, good := range []string{"traceparent", "X-Request-Id", "a", "!#$%&'*+-.^_`|~", strings.Repeat("h", 128),
		"Natsy", "Outboxed", "Statuses"} {
		if err := CheckHeaderName(good); err != nil {
			t.Errorf("CheckHeaderName(%q) = %v, want nil", good, err)
		}
	}
	bad := map[string]string{
		"":                       "want 1 to 128 characters",
		strings.Repeat("h", 129): "want 1 to 128 characters",
		"with space":             "is not allowed in a header name",
		"colon:":                 "is not allowed in a header name",
		"é":                      "is not allowed in a header name",
		"Status":                 "is reserved",
		"DESCRIPTION":            "is reserved",
		"Nats-Msg-Id":            `names starting with "Nats-" are reserved`,
		"outbox-event-id":        `names starting with "outbox-" are reserved`,
	}
	for name, want := range bad {
		if err := CheckHeaderName(name); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckHeaderName(%q) = %v, want an error saying %q", name, err, want)
		}
	}
}
