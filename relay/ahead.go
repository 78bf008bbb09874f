package relay

import "context"

// ahead runs one start-up step on a goroutine of its own, beside the
// steps that do not depend on it (NATS beside Postgres, the replication
// connection's dial beside the take-up), so that their waits overlap.
// Whoever starts it owns it and discards it before returning; whoever
// waits for it owns the result.
type ahead[T any] struct {
	cancel context.CancelFunc
	done   chan struct{}
	v      T
	err    error
	taken  bool // wait returned the result: its caller owns it
}

// runAhead starts fn with a context of its own, derived from ctx.
func runAhead[T any](ctx context.Context, fn func(context.Context) (T, error)) *ahead[T] {
	ctx, cancel := context.WithCancel(ctx)
	a := &ahead[T]{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.v, a.err = fn(ctx)
	}()
	return a
}

// wait returns fn's result once it is there; the caller owns it.
func (a *ahead[T]) wait() (T, error) {
	<-a.done
	a.cancel()
	a.taken = true
	return a.v, a.err
}

// discard cancels fn and waits for it; a result nobody waited for is
// handed to release (closing a connection, say).
func (a *ahead[T]) discard(release func(T)) {
	a.cancel()
	<-a.done
	if !a.taken && a.err == nil && release != nil {
		release(a.v)
	}
}
