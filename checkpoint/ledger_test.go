package checkpoint

import (
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// TestLedgerMoved: as a session starts, the slot may be where the relay
// stopped cleanly (exactly), or, after any other stop, up to the limit
// plus Slack; beyond is someone else's move.
func TestLedgerMoved(t *testing.T) {
	l := NewLedger(nil, 0x100, 0x300, zerolog.Nop())
	l.stopped = 0x280
	for _, c := range []struct {
		at   uint64
		want string
	}{{0x200, ""}, {0x280, ""}, {0x281, "beyond where this relay stopped (0/280"}} {
		if got := l.Moved("outbox_relay", lsn(c.at)); (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("stopped at 0/280, slot at %s: Moved = %q, want %q", lsn(c.at), got, c.want)
		}
	}
	l.stopped = 0
	if got := l.Moved("outbox_relay", lsn(0x300+Slack)); got != "" {
		t.Errorf("no clean stop, slot at the limit plus the slack: Moved = %q, want none", got)
	}
	if got := l.Moved("outbox_relay", lsn(0x301+Slack)); !strings.Contains(got, "beyond anything this relay confirmed (0/300)") {
		t.Errorf("no clean stop, slot past the limit plus the slack: Moved = %q", got)
	}
}
