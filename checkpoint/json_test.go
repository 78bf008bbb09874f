package checkpoint

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/jsoncheck"
)

// TestDeadLetterJSON: dlq list --json in the style of docs/json.md.
func TestDeadLetterJSON(t *testing.T) {
	now, s := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), "x"
	list := []DeadLetter{{EventID: "e", Reason: "r", DeadLettered: now},
		{EventID: "e", Reason: "r", CommitLSN: "0/16B3748", DeadLettered: now, Retried: &now, AggregateType: &s, AggregateID: &s, EventType: &s}}
	b, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	if p := jsoncheck.Check(b); p != nil {
		t.Errorf("%v\n%s", p, b)
	}
}
