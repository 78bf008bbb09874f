package consumer

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// afterCommit, when set (by tests), runs between a handler's commit and
// the ack.
var afterCommit func(*Message)

// ackTimeout bounds the wait for the server to confirm an ack.
const ackTimeout = 5 * time.Second

// process handles one delivery to its end: acked, naked or terminated.
func (c *Consumer) process(ctx context.Context, jm jetstream.Msg) {
	m, err := newMessage(jm)
	if err != nil {
		c.log.Error().Err(err).Str("subject", jm.Subject()).Msg("not a JetStream message; terminating it")
		_ = jm.Term()
		return
	}
	ctx, span := c.traced(ctx, m)
	defer span.End()
	log := c.log.With().Str("event_id", m.ID).Uint64("stream_seq", m.StreamSeq).Uint64("deliveries", m.Delivered).Logger()
	if m.ID == "" {
		c.fail(ctx, jm, m, errors.New("message has no Nats-Msg-Id: it cannot be deduplicated"))
		return
	}

	tx, err := c.db.begin(ctx)
	if err != nil {
		c.retryLater(ctx, jm, m, fmt.Errorf("begin: %w", err))
		return
	}
	defer tx.rollback(context.WithoutCancel(ctx)) // a no-op after commit
	claimed, err := c.store.claim(ctx, tx, c.name, m.ID)
	if err != nil {
		c.retryLater(ctx, jm, m, err)
		return
	}
	if !claimed {
		_ = tx.rollback(ctx)
		log.Debug().Msg("already processed; acknowledging")
		c.ack(ctx, jm, m)
		return
	}
	if err := c.runHandler(ctx, jm, tx, m); err != nil {
		_ = tx.rollback(context.WithoutCancel(ctx))
		var permanent *permanentError
		if errors.As(err, &permanent) || m.Delivered >= c.maxDeliveries {
			c.fail(ctx, jm, m, err)
			return
		}
		c.retryLater(ctx, jm, m, fmt.Errorf("handler: %w", err))
		return
	}
	if err := tx.commit(ctx); err != nil {
		// Committed or not, a redelivery tells: it finds the row or runs again.
		c.retryLater(ctx, jm, m, fmt.Errorf("commit: %w", err))
		return
	}
	if afterCommit != nil {
		afterCommit(m)
	}
	c.ack(ctx, jm, m)
}

// runHandler runs the handler, keeping the message in progress on the
// server while it runs, and turns a panic into an error.
func (c *Consumer) runHandler(ctx context.Context, jm jetstream.Msg, tx txn, m *Message) (err error) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(done)
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(max(c.ackWait/3, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = jm.InProgress()
			}
		}
	}()
	defer func() {
		if r := recover(); r != nil {
			c.log.Error().Str("event_id", m.ID).Str("stack", string(debug.Stack())).Msgf("handler panicked: %v", r)
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return tx.handle(ctx, m)
}

// ack acknowledges m and waits for the server's confirmation. A lost ack
// costs a redelivery, which finds the event processed.
func (c *Consumer) ack(ctx context.Context, jm jetstream.Msg, m *Message) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
	defer cancel()
	if err := jm.DoubleAck(actx); err != nil {
		c.log.Warn().Err(err).Str("event_id", m.ID).Msg("ack not confirmed; the redelivery will be skipped as processed")
	}
}

// retryLater naks m with the delay for its delivery count.
func (c *Consumer) retryLater(ctx context.Context, jm jetstream.Msg, m *Message, err error) {
	spanFailed(ctx, err)
	delay := c.delay(m.Delivered)
	c.log.Warn().Err(err).Str("event_id", m.ID).Uint64("deliveries", m.Delivered).Dur("retry_in", delay).Msg("will retry")
	c.nak(jm, delay, err.Error())
}

func (c *Consumer) nak(jm jetstream.Msg, delay time.Duration, why string) {
	var err error
	if delay > 0 {
		err = jm.NakWithDelay(delay)
	} else {
		err = jm.Nak()
	}
	if err != nil {
		c.log.Warn().Err(err).Str("reason", why).Msg("nak failed; the message comes back after AckWait")
	}
}

// delay is the backoff before delivery n+1: base, doubled for each
// delivery after the first, at most maxBackoff.
func (c *Consumer) delay(delivered uint64) time.Duration {
	d := c.backoff
	for i := uint64(1); i < delivered && d < c.maxBackoff; i++ {
		d *= 2
	}
	return min(d, c.maxBackoff)
}

// fail records m in failed_events, then terminates it. If the record
// cannot be written, m is naked: a message is never dropped unrecorded.
func (c *Consumer) fail(ctx context.Context, jm jetstream.Msg, m *Message, cause error) {
	spanFailed(ctx, cause)
	if err := c.store.recordFailure(ctx, c.db, c.name, m, cause); err != nil {
		c.retryLater(ctx, jm, m, fmt.Errorf("record failure (%v): %w", cause, err))
		return
	}
	c.log.Error().Err(cause).Str("event_id", m.recordID()).Uint64("stream_seq", m.StreamSeq).Uint64("deliveries", m.Delivered).
		Msg("giving up: recorded in failed_events and terminated")
	if err := jm.TermWithReason(truncate(cause.Error(), 256)); err != nil {
		c.log.Warn().Err(err).Str("event_id", m.recordID()).Msg("term failed; the message comes back after AckWait")
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
