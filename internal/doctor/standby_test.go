package doctor

import (
	"errors"
	"testing"

	"github.com/outbox-relay/outbox-relay/contract"
)

// TestErrorFinding: a check's error is an error finding; a FatalError's
// hint becomes its fix.
func TestErrorFinding(t *testing.T) {
	fatal := &contract.FatalError{Err: errors.New("the server is a standby"), Hint: "point --pg-url at the primary"}
	want := Finding{Check: "postgres.standby", Severity: Error, Message: "the server is a standby", Fix: "point --pg-url at the primary"}
	if got := errorFinding("postgres.standby", fatal); got != want {
		t.Errorf("errorFinding(FatalError) = %+v, want %+v", got, want)
	}
	want = Finding{Check: "postgres.standby", Severity: Error, Message: "boom"}
	if got := errorFinding("postgres.standby", errors.New("boom")); got != want {
		t.Errorf("errorFinding(error) = %+v, want %+v", got, want)
	}
}
