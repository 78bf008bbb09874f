package sink

import (
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
)

// A dead letter is recorded under its row's id whenever the row has one,
// even an id a Nats-Msg-Id cannot carry, so that the dead-letter view and
// `dlq retry` find the row; an event without any id, or with one longer
// than a dead letter carries whole, falls back to the id its dead letter is
// stored under.
func TestDeadLetterKey(t *testing.T) {
	const stored = "0/16B3748#3"
	long := strings.Repeat("x ", contract.MaxDeadLetterValue)
	for _, tc := range []struct{ id, want string }{
		{"7c9e6679-7425-40de-944b-e07fc1f90ae7", "7c9e6679-7425-40de-944b-e07fc1f90ae7"},
		{"order 42", "order 42"},
		{"tab\tid", "tab\tid"},
		{"", stored},
		{long, stored},
		{long[:contract.MaxDeadLetterValue] + "…", stored}, // as a cut Outbox-Event-Id reads back
	} {
		if got := DeadLetterKey(tc.id, stored); got != tc.want {
			t.Errorf("DeadLetterKey(%.20q) = %.20q, want %.20q", tc.id, got, tc.want)
		}
	}
}

// Only replay's copies are copies; every message published by hand is a
// one-shot. A row whose own id reads like a copy's is no copy.
func TestCopyAndOneShot(t *testing.T) {
	for _, tc := range []struct {
		name          string
		ev            StoredEvent
		copy, oneShot bool
	}{
		{"relay", StoredEvent{ID: "1"}, false, false},
		{"republish", StoredEvent{ID: "1", Replay: contract.ReplayRepublish}, false, true},
		{"retry", StoredEvent{ID: "1", Replay: contract.ReplayRetry}, false, true},
		{"copy", StoredEvent{ID: contract.ReplayMsgID("r", "1"), Replay: contract.ReplayCopy}, true, true},
		{"row id like a copy's", StoredEvent{ID: contract.ReplayMsgID("r", "1"), Position: decode.Position{CommitLSN: 0x10}}, false, false},
	} {
		if got := tc.ev.Copy(); got != tc.copy {
			t.Errorf("%s: Copy() = %v, want %v", tc.name, got, tc.copy)
		}
		if got := tc.ev.OneShot(); got != tc.oneShot {
			t.Errorf("%s: OneShot() = %v, want %v", tc.name, got, tc.oneShot)
		}
	}
}
