package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// group runs the relay's background components (the publisher's recovery
// loop, the slot monitor, the confirmation gate) beside the replication
// stream. One that fails stops the stream; they stop after it.
//
// It is not oklog/run, whose actors all stop together when one returns:
// the relay's teardown is ordered and uses two contexts. The stream's
// context ends first (a signal or a failure); the stream then drains, which
// needs the publisher still receiving PubAcks and the gate still clearing
// positions, and sends its final status update. Only then does stop end
// the components' context and wait for them.
type group struct {
	ctx    context.Context // the stream's context: cancelled by a failure
	cancel context.CancelCauseFunc
	bgCtx  context.Context // the components' context: cancelled by stop
	bgStop context.CancelFunc
	wg     sync.WaitGroup
}

func newGroup(parent context.Context) *group {
	g := &group{}
	g.ctx, g.cancel = context.WithCancelCause(parent)
	g.bgCtx, g.bgStop = context.WithCancel(context.WithoutCancel(parent))
	return g
}

// goRun runs a component until stop; its error, unless stop caused it,
// cancels the stream's context.
func (g *group) goRun(name string, run func(context.Context) error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := run(g.bgCtx); err != nil && g.bgCtx.Err() == nil {
			g.cancel(fmt.Errorf("%s: %w", name, err))
		}
	}()
}

// failure returns why a background component stopped the relay, if one did.
func (g *group) failure() error {
	if err := context.Cause(g.ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// stop ends the components and waits for them.
func (g *group) stop() {
	g.bgStop()
	g.wg.Wait()
	g.cancel(nil)
}
