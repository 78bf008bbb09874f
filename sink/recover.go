package sink

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/outbox-relay/outbox-relay/internal/retry"
)

// Run expires PubAcks that take too long, notices dropped connections and
// drives recovery after failures. It returns when ctx ends.
func (p *Publisher) Run(ctx context.Context) error {
	status := p.nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED)
	defer p.nc.RemoveStatusListener(status)
	tick := time.NewTicker(p.tickInterval())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-status:
			p.connectionLost()
		case <-tick.C:
			p.expire(time.Now())
		case <-p.wake:
		}
		if p.outage() {
			p.recover(ctx, status, tick.C)
		}
	}
}

func (p *Publisher) tickInterval() time.Duration {
	return max(p.cfg.AckTimeout/10, 10*time.Millisecond)
}

func (p *Publisher) outage() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.healthy
}

// connectionLost fails every message on the wire: their PubAcks, if any
// were sent, went to the old connection and will never arrive.
func (p *Publisher) connectionLost() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for seq := p.head; seq < p.next; seq++ {
		if s := &p.ring[seq&p.mask]; s.state == sent {
			s.state = failed
			p.failLocked(ErrDisconnected, s)
		}
	}
}

// expire fails messages whose PubAck is overdue.
func (p *Publisher) expire(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for seq := p.head; seq < p.next; seq++ {
		s := &p.ring[seq&p.mask]
		if s.state == sent && now.Sub(s.sentAt) > p.cfg.AckTimeout {
			s.state = failed
			p.failLocked(ErrAckTimeout, s)
		}
	}
}

// recover brings the Publisher back to sending: it waits until nothing is
// on the wire, then republishes the first unacknowledged message alone
// until JetStream stores it, then everything after it, in order.
func (p *Publisher) recover(ctx context.Context, status <-chan nats.Status, tick <-chan time.Time) {
	backoff := retry.NewBackoff(100*time.Millisecond, 5*time.Second)
	started := time.Now()
	logs := retry.NewLogLimiter()
	for attempt := 1; ; attempt++ {
		// Wait for every message on the wire to settle (acknowledged,
		// refused, timed out or cut off) and for a connection.
		for !p.settled() || !p.nc.IsConnected() {
			select {
			case <-ctx.Done():
				return
			case <-status:
				p.connectionLost()
			case now := <-tick:
				p.expire(now)
			case <-p.wake:
			}
		}
		if p.probe(ctx, status, tick) {
			p.resume(attempt, time.Since(started))
			return
		}
		if logs.Allow() {
			p.mu.Lock()
			problem := p.problem
			p.mu.Unlock()
			p.log.Warn().Err(problem).Int("attempt", attempt).Dur("outage", time.Since(started).Round(time.Millisecond)).
				Str("hint", Hint(problem)).Msg("JetStream still not accepting the next event; retrying")
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff.Next()):
		}
	}
}

// settled reports whether no message is waiting for a reply.
func (p *Publisher) settled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for seq := p.head; seq < p.next; seq++ {
		if p.ring[seq&p.mask].state == sent {
			return false
		}
	}
	return true
}

// probe republishes the first unacknowledged message and waits for its
// outcome. It reports true when it was stored (or nothing was left).
func (p *Publisher) probe(ctx context.Context, status <-chan nats.Status, tick <-chan time.Time) bool {
	p.mu.Lock()
	p.sendNext = p.head
	for p.sendNext < p.next && p.ring[p.sendNext&p.mask].state == acked {
		p.sendNext++
	}
	if p.sendNext == p.next {
		p.mu.Unlock()
		return true
	}
	seq := p.sendNext
	p.mu.Unlock()

	p.sendQueued(true)
	for {
		p.mu.Lock()
		done := seq < p.head || p.ring[seq&p.mask].state != sent
		ok := seq < p.head || p.ring[seq&p.mask].state == acked
		p.mu.Unlock()
		if done {
			return ok
		}
		select {
		case <-ctx.Done():
			return false
		case <-status:
			p.connectionLost()
		case now := <-tick:
			p.expire(now)
		case <-p.wake:
		}
	}
}

// resume ends the outage and sends everything still unacknowledged.
func (p *Publisher) resume(attempts int, outage time.Duration) {
	p.mu.Lock()
	p.healthy = true
	problem := p.problem
	p.problem = nil
	p.sendNext = p.head
	pending := p.next - p.head
	p.mu.Unlock()
	p.log.Info().AnErr("after", problem).Int("attempts", attempts).Dur("outage", outage.Round(time.Millisecond)).
		Uint64("republishing", pending).Msg("JetStream accepts events again; republishing in order")
	p.sendQueued(false)
}
