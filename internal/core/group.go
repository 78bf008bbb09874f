package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Group runs a relay's background components (the publisher's recovery
// loop, the slot monitor, the confirmation gate, the NOTIFY listener)
// beside its foreground loop (the replication stream, or the polling
// loop). One that fails stops the foreground loop; they stop after it.
//
// It is not oklog/run, whose actors all stop together when one returns:
// the relay's teardown is ordered and uses two contexts. The foreground
// context (Context) ends first (a signal or a failure); the loop then
// drains, which needs the publisher still receiving PubAcks and the gate
// still clearing positions, and sends its final status update or commit.
// Only then does Stop end the components' context and wait for them.
type Group struct {
	ctx    context.Context // the stream's context: cancelled by a failure
	cancel context.CancelCauseFunc
	bgCtx  context.Context // the components' context: cancelled by stop
	bgStop context.CancelFunc
	wg     sync.WaitGroup
}

// NewGroup returns a Group whose stream context ends with parent.
func NewGroup(parent context.Context) *Group {
	g := &Group{}
	g.ctx, g.cancel = context.WithCancelCause(parent)
	g.bgCtx, g.bgStop = context.WithCancel(context.WithoutCancel(parent))
	return g
}

// Go runs a component until Stop; its error, unless Stop caused it,
// cancels the stream's context.
func (g *Group) Go(name string, run func(context.Context) error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := run(g.bgCtx); err != nil && g.bgCtx.Err() == nil {
			g.cancel(fmt.Errorf("%s: %w", name, err))
		}
	}()
}

// Context is the foreground loop's context: it ends with the parent's,
// or when a component fails.
func (g *Group) Context() context.Context { return g.ctx }

// Failure returns why a background component stopped the relay, if one did.
func (g *Group) Failure() error {
	if err := context.Cause(g.ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// Stop ends the components and waits for them.
func (g *Group) Stop() {
	g.bgStop()
	g.wg.Wait()
	g.cancel(nil)
}
