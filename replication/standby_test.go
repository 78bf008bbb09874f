package replication

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestStandby: a stream is a standby while its latest session found the
// slot busy, recently; any other ending, or a stale answer, is not.
func TestStandby(t *testing.T) {
	s := &Stream{}
	if s.Standby() {
		t.Fatal("a new stream is a standby")
	}
	s.noteSession(fmt.Errorf("session: %w", errSlotBusy))
	if !s.Standby() {
		t.Fatal("not a standby after the slot was found busy")
	}
	s.busyAt.Store(time.Now().Add(-standbyFresh - time.Second).UnixNano())
	if s.Standby() {
		t.Error("a standby whose last answer is stale (Postgres unreachable)")
	}
	s.noteSession(errSlotBusy)
	s.noteSession(errors.New("connection refused"))
	if s.Standby() {
		t.Error("still a standby after a session ended otherwise")
	}
}
