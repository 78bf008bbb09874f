package contract

import (
	"errors"
	"fmt"
	"testing"
)

func TestFatalErrorGap(t *testing.T) {
	cause := errors.New("slot gone")
	err := fmt.Errorf("session: %w", &FatalError{Err: cause, Hint: "h", Gap: true})
	if !errors.Is(err, ErrGap) || !errors.Is(err, cause) {
		t.Errorf("a gap FatalError must match both ErrGap and its cause: %v", err)
	}
	if errors.Is(&FatalError{Err: cause}, ErrGap) {
		t.Error("a FatalError without Gap matches ErrGap")
	}
	if got, want := err.Error(), "session: slot gone: h"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
