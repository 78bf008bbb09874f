package checkpoint

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/retry"
)

// Gate decides how far the relay may confirm, from two conditions that
// need Postgres round trips, checked on a goroutine of its own so that
// the replication goroutine never waits for them:
//
//   - the relay's record allows it (the Ledger, written ahead);
//   - the publication still held the outbox table at that point of the
//     WAL (the check returns the WAL position at which it verified it).
//
// The replication goroutine asks with Allow, which never blocks: it gets
// the smaller of what it wants and what the gate has cleared so far.
type Gate struct {
	ledger  *Ledger
	check   func(ctx context.Context) (pglogrepl.LSN, error)
	every   time.Duration
	log     zerolog.Logger
	allowed atomic.Uint64
	wanted  atomic.Uint64
	failure atomic.Pointer[error]
	wake    chan struct{}
	// mu orders raising the allowance against Rewind: a round begun
	// before a rewind (epoch changed since) raises nothing.
	mu    sync.Mutex
	epoch uint64
}

// NewGate returns a Gate over ledger. check verifies the publication and
// returns the current WAL position; an error it returns that
// IsFatal reports stops confirmation for good.
func NewGate(ledger *Ledger, check func(ctx context.Context) (pglogrepl.LSN, error), log zerolog.Logger) *Gate {
	return &Gate{ledger: ledger, check: check, every: 200 * time.Millisecond, log: log, wake: make(chan struct{}, 1)}
}

// fatalError marks a check failure that must stop the relay.
type fatalError interface{ Fatal() bool }

// Allow returns the newest position up to flushed that may be confirmed
// now, and asks the gate to clear flushed soon. It returns the gate's
// failure once the publication check failed.
func (g *Gate) Allow(flushed pglogrepl.LSN) (pglogrepl.LSN, error) {
	if errp := g.failure.Load(); errp != nil {
		return 0, *errp
	}
	for {
		w := g.wanted.Load()
		if uint64(flushed) <= w || g.wanted.CompareAndSwap(w, uint64(flushed)) {
			break
		}
	}
	allowed := pglogrepl.LSN(g.allowed.Load())
	if flushed > allowed {
		select {
		case g.wake <- struct{}{}:
		default:
		}
		return allowed, nil
	}
	return flushed, nil
}

// Final clears flushed at once, for the last confirmation before the
// relay stops.
func (g *Gate) Final(ctx context.Context, flushed pglogrepl.LSN) pglogrepl.LSN {
	at, err := g.check(ctx)
	if err != nil {
		return min(flushed, pglogrepl.LSN(g.allowed.Load()))
	}
	return min(g.ledger.Confirmable(ctx, flushed, true), at)
}

// Run clears positions until ctx ends, or returns the check's fatal error.
func (g *Gate) Run(ctx context.Context) error {
	tick := time.NewTicker(g.every)
	defer tick.Stop()
	logs := retry.NewLogLimiter()
	for {
		if err := g.clear(ctx); err != nil {
			var fe fatalError
			if errors.As(err, &fe) && fe.Fatal() {
				g.failure.Store(&err)
				return err
			}
			if ctx.Err() == nil && logs.Allow() {
				g.log.Warn().Err(err).Msg("cannot check the publication yet; confirming nothing new meanwhile")
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-g.wake:
		}
	}
}

// Rewind takes back the allowance beyond at: the WAL there is another
// timeline's now (a promotion, a point-in-time recovery forked at at).
// What the gate cleared beyond it, the publication checked on the old
// timeline, says nothing about the new one's WAL at those positions.
func (g *Gate) Rewind(at pglogrepl.LSN) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.epoch++
	g.allowed.Store(min(g.allowed.Load(), uint64(at)))
	g.wanted.Store(min(g.wanted.Load(), uint64(at)))
}

// clear runs one round: verify the publication, raise the record if
// needed, and publish the new allowance.
func (g *Gate) clear(ctx context.Context) error {
	g.mu.Lock()
	epoch, want := g.epoch, pglogrepl.LSN(g.wanted.Load())
	g.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	at, err := g.check(cctx)
	if err != nil {
		return err
	}
	limit := g.ledger.Confirmable(cctx, min(want, at), false)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.epoch == epoch {
		g.allowed.Store(uint64(max(pglogrepl.LSN(g.allowed.Load()), min(limit, at))))
	}
	return nil
}
