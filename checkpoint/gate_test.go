package checkpoint

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rs/zerolog"
)

type fatalErr struct{ error }

func (fatalErr) Fatal() bool { return true }

// TestGate: positions are cleared only up to where the publication was
// verified, Allow never blocks, and a failed check stops confirmation.
func TestGate(t *testing.T) {
	var at atomic.Uint64
	at.Store(0x1000)
	var broken, unreachable atomic.Bool
	check := func(context.Context) (pglogrepl.LSN, error) {
		if unreachable.Load() {
			return 0, errors.New("the database system is shutting down")
		}
		if broken.Load() {
			return 0, fatalErr{errors.New("table left the publication")}
		}
		return pglogrepl.LSN(at.Load()), nil
	}
	ledger := NewLedger(nil, 0, 1<<40, zerolog.Nop()) // a limit far ahead: no record writes
	g := NewGate(ledger, check, zerolog.Nop())
	g.every = 5 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()

	waitFor := func(flushed, want pglogrepl.LSN) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Second)
		for {
			got, err := g.Allow(flushed)
			if err != nil {
				t.Fatal(err)
			}
			if got == want {
				return
			}
			if got > want || time.Now().After(deadline) {
				t.Fatalf("Allow(%s) = %s, want %s", flushed, got, want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor(0x800, 0x800)   // behind the verified position: at once
	waitFor(0x2000, 0x1000) // ahead of it: only up to it
	at.Store(0x3000)
	waitFor(0x2000, 0x2000)

	// A check that fails for a while (Postgres restarting, a shutdown that
	// refuses queries) confirms nothing new, and is no failure.
	unreachable.Store(true)
	time.Sleep(20 * g.every)
	at.Store(0x6000)
	if got, err := g.Allow(0x5000); err != nil || got != 0x2000 {
		t.Fatalf("Allow(0x5000) while the check fails = %s, %v; want 0/2000 and no error", got, err)
	}
	if got := g.Final(ctx, 0x5000); got != 0x2000 {
		t.Fatalf("Final(0x5000) while the check fails = %s, want 0/2000", got)
	}
	unreachable.Store(false)
	waitFor(0x5000, 0x5000)
	if got := g.Final(ctx, 0x5800); got != 0x5800 {
		t.Fatalf("Final(0x5800) = %s, want it cleared at once", got)
	}

	broken.Store(true)
	if err := <-done; err == nil {
		t.Fatal("Run did not stop on a failed check")
	}
	if _, err := g.Allow(0x2500); err == nil {
		t.Fatal("Allow still clears positions after a failed check")
	}
}
