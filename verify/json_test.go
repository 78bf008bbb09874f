package verify

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/jsoncheck"
)

// TestReportJSON: verify --json in the style of docs/json.md, zero and
// populated; lists are [] rather than null.
func TestReportJSON(t *testing.T) {
	full := Report{Rows: 3, Messages: 3, DeadLetters: 1, Missing: []string{"a"}, Extra: []string{"b"}, Duplicates: map[string]int{"Ev-1": 2},
		OrderViolations: []Violation{{Aggregate: "order/1", EventID: "c", After: "d"}}, Unparsed: []Unparsed{{Seq: 4, Subject: "outbox.x", Reason: "no id"}},
		LeftOut: &LeftOut{Before: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Limits: "max_age 1h", Rows: 2}}
	for name, r := range map[string]Report{"zero": {}, "populated": full} {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if p := jsoncheck.Check(b, "duplicates"); p != nil {
			t.Errorf("%s report: %v\n%s", name, p, b)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"missing", "extra", "duplicates", "order_violations", "unparsed"} {
			if m[k] == nil {
				t.Errorf("%s report: %s is null, want an empty list:\n%s", name, k, b)
			}
		}
	}
}
