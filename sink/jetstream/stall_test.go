package jetstream

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// droppingStream is the stream seen through a JetStream that drops API
// requests without a reply, as a server does while JetStream is stopping:
// while dropping, Info and GetMsg wait until their context ends.
type droppingStream struct {
	natsjs.Stream
	dropping atomic.Bool
	waiting  atomic.Int32 // dropped requests not yet given up

	mu    sync.Mutex
	ended []error // why each dropped request was given up
}

func (s *droppingStream) drop(ctx context.Context) error {
	s.waiting.Add(1)
	defer s.waiting.Add(-1)
	<-ctx.Done()
	s.mu.Lock()
	s.ended = append(s.ended, ctx.Err())
	s.mu.Unlock()
	return ctx.Err()
}

func (s *droppingStream) Info(ctx context.Context, opts ...natsjs.StreamInfoOpt) (*natsjs.StreamInfo, error) {
	if s.dropping.Load() {
		return nil, s.drop(ctx)
	}
	return s.Stream.Info(ctx, opts...)
}

func (s *droppingStream) GetMsg(ctx context.Context, seq uint64, opts ...natsjs.GetMsgOpt) (*natsjs.RawStreamMsg, error) {
	if s.dropping.Load() {
		return nil, s.drop(ctx)
	}
	return s.Stream.GetMsg(ctx, seq, opts...)
}

func (s *droppingStream) endings() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ended)
}

// TestRecoveryRequestDropped: recovery reads the stream (reconcile) while
// JetStream drops API requests, for longer than the stream's duplicate
// window. A dropped request must not hold recovery for the 30s of one long
// deadline: it is given up as soon as the connection drops (the server
// restarts gracefully), or after a short per-request timeout when the
// connection stays up, and tried again; the events it finds stored are
// not sent again (a copy would be stored twice).
func TestRecoveryRequestDropped(t *testing.T) {
	cases := []struct {
		name       string
		ackTimeout time.Duration // also each recovery request's timeout
		restart    bool
		wantEnd    error // why the dropped request was given up
	}{
		{"server restarts gracefully", 20 * time.Second, true, context.Canceled},
		{"connection stays up", time.Second, false, context.DeadlineExceeded},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			const dupWindow = 100 * time.Millisecond // JetStream's smallest
			e := newTestEnv(t, natsjs.StreamConfig{Duplicates: dupWindow})
			stream := &droppingStream{Stream: e.stream}
			p := e.publisher(t, Config{Window: 64, AckTimeout: c.ackTimeout, Stream: stream})
			gate := gateReplies(t, p, gatePass)
			run(t, p)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			publish := func(from, to int) { t.Helper(); publishRange(ctx, t, p, from, to) }

			publish(1, 10)
			waitFor(t, 5*time.Second, "events 1..10 acknowledged", func() bool { return p.AckedThrough() == 10 })
			// 11..20 are stored, their PubAcks lost: recovery must look
			// in the stream for them.
			gate.set(gateDrop)
			publish(11, 20)
			waitFor(t, 5*time.Second, "events 11..20 stored", func() bool { return e.lastSeq(t) == 20 })
			stream.dropping.Store(true)
			gate.set(gatePass)
			p.expire(time.Now().Add(c.ackTimeout + time.Second)) // their PubAcks are overdue
			waitFor(t, 5*time.Second, "recovery to send a stream request", func() bool { return stream.waiting.Load() == 1 })
			// Not synchronisation: the outage outlasts the duplicate
			// window, so only recovery's read of the stream can keep
			// 11..20 from being stored twice.
			time.Sleep(2 * dupWindow)
			stream.dropping.Store(false) // later requests are answered

			back := time.Now()
			if c.restart {
				e.srv.Stop() // graceful: the client stays connected until JetStream has stopped
				e.start(t)
				back = time.Now()
			}
			publish(21, 30)
			const within = 5 * time.Second // well under the old 30s request deadline
			drain(t, p, within)
			t.Logf("recovered %s after the server was back", time.Since(back).Round(time.Millisecond))
			if got := stream.endings(); len(got) != 1 || !errors.Is(got[0], c.wantEnd) {
				t.Errorf("dropped requests ended with %v, want one ended by %v", got, c.wantEnd)
			}
			if got, want := ids(e.contents(t)), wantIDs(1, 30); !slices.Equal(got, want) {
				t.Fatalf("stream holds %v, want %v", got, want)
			}
		})
	}
}
