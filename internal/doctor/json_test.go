package doctor

import (
	"encoding/json"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/jsoncheck"
)

// TestReportJSON: doctor --json in the style of docs/json.md.
func TestReportJSON(t *testing.T) {
	var full Report
	full.Add(Finding{Check: "postgres.wal_level", Severity: Error, Message: "m", Fix: "f"}, Finding{Check: "nats.stream", Severity: Warn, Message: "m"})
	for name, r := range map[string]Report{"zero": {}, "populated": full} {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if p := jsoncheck.Check(b); p != nil {
			t.Errorf("%s report: %v\n%s", name, p, b)
		}
	}
}
