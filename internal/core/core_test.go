package core

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/decode"
)

// A dead letter is recorded under its row's id whenever the row has one,
// even an id a Nats-Msg-Id cannot carry, so that the dead-letter view and
// `dlq retry` find the row; only an event without any id falls back to its
// WAL position.
func TestDeadLetterKey(t *testing.T) {
	at := decode.Position{CommitLSN: 0x16B3748, Index: 3}
	for _, tc := range []struct{ id, want string }{
		{"7c9e6679-7425-40de-944b-e07fc1f90ae7", "7c9e6679-7425-40de-944b-e07fc1f90ae7"},
		{"order 42", "order 42"},
		{"tab\tid", "tab\tid"},
		{"", at.String()},
	} {
		ev := decode.Event{ID: tc.id, Position: at}
		if got := DeadLetterKey(&ev); got != tc.want {
			t.Errorf("DeadLetterKey(%q) = %q, want %q", tc.id, got, tc.want)
		}
	}
}
