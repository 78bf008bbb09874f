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

// TestGateRewind: after a timeline change forking at 0x1000, the gate's
// allowance from the old timeline (0x2000) is taken back: positions beyond
// the fork are cleared again, against the new timeline's WAL.
func TestGateRewind(t *testing.T) {
	var at atomic.Uint64
	at.Store(0x3000)
	check := func(context.Context) (pglogrepl.LSN, error) { return pglogrepl.LSN(at.Load()), nil }
	g := NewGate(NewLedger(nil, 0, 1<<40, zerolog.Nop()), check, zerolog.Nop())
	g.every = 5 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = g.Run(ctx) }()
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
		if got, _ := g.Allow(0x2000); got == 0x2000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the gate never cleared 0/2000")
		}
	}
	at.Store(0x1400) // the new timeline's WAL ends here
	g.Rewind(0x1000)
	if got, err := g.Allow(0x1800); err != nil || got > 0x1400 {
		t.Fatalf("after a rewind to 0/1000, Allow(0/1800) = %s, %v; want at most the new timeline's 0/1400", got, err)
	}
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
		got, err := g.Allow(0x1800)
		if err != nil || got > 0x1400 {
			t.Fatalf("Allow(0/1800) = %s, %v; want at most the new timeline's 0/1400", got, err)
		}
		if got == 0x1400 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gate never cleared the new timeline's 0/1400 (last %s)", got)
		}
	}
}

// TestGateRewindDuringARound: a round that checked the old timeline's WAL
// (0x3000) and ends after the rewind raises nothing; the next round checks
// the new timeline's (0x1400).
func TestGateRewindDuringARound(t *testing.T) {
	var calls atomic.Int32
	inRound, release := make(chan struct{}), make(chan struct{})
	check := func(context.Context) (pglogrepl.LSN, error) {
		if calls.Add(1) == 1 {
			close(inRound)
			<-release
			return 0x3000, nil // checked on the old timeline
		}
		return 0x1400, nil
	}
	g := NewGate(NewLedger(nil, 0, 1<<40, zerolog.Nop()), check, zerolog.Nop())
	g.every = 5 * time.Millisecond
	if got, _ := g.Allow(0x2000); got != 0 {
		t.Fatalf("Allow(0/2000) before any round = %s, want 0/0", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = g.Run(ctx) }()
	<-inRound
	g.Rewind(0x1000)
	close(release)
	for calls.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	if got, err := g.Allow(0x1800); err != nil || got > 0x1400 {
		t.Fatalf("Allow(0/1800) after a round begun before the rewind = %s, %v; want at most the new timeline's 0/1400", got, err)
	}
}
