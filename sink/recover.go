package sink

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
		p.recordDeadLetters(ctx)
		if p.outage() {
			p.recover(ctx, status, tick.C)
		}
	}
}

func (p *Publisher) tickInterval() time.Duration {
	return max(p.cfg.AckTimeout/10, 10*time.Millisecond)
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
			p.recordDeadLetters(ctx)
		}
		p.refreshLimits(ctx)
		p.reconcile(ctx)
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
	for p.sendNext < p.next && (p.ring[p.sendNext&p.mask].state == acked || p.ring[p.sendNext&p.mask].state == recording) {
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
		p.recordDeadLetters(ctx)
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

// reconcile looks in the stream, before anything is republished, for the
// unacknowledged events it already holds: their PubAcks were lost with a
// connection, or timed out. Those count as stored and are not sent again,
// so an outage longer than the stream's dedup window leaves no duplicates.
func (p *Publisher) reconcile(ctx context.Context) {
	if p.cfg.Stream == nil {
		return
	}
	p.mu.Lock()
	from := max(p.lastStreamSeq, p.cfg.StartSeq) + 1
	want := map[string]uint64{}
	for seq := p.head; seq < p.next; seq++ {
		s := &p.ring[seq&p.mask]
		if s.attempt == 0 || s.state == acked || s.state == recording {
			continue
		}
		if s.deadLetter != "" || s.ev.Problem != "" {
			want[deadLetterMsgID(&s.ev)] = seq
		} else {
			want[s.ev.ID] = seq
		}
	}
	p.mu.Unlock()
	if len(want) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	info, err := p.cfg.Stream.Info(rctx)
	if err != nil {
		p.log.Warn().Err(err).Msg("cannot read the stream to find events it already holds; republishing relies on its dedup window")
		return
	}
	// Others may publish to the stream too: read a bounded number of messages.
	last := min(info.State.LastSeq, from+uint64(4*len(p.ring)))
	found := 0
	for seq := from; seq <= last && len(want) > 0; seq++ {
		m, err := p.cfg.Stream.GetMsg(rctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			p.log.Warn().Err(err).Msg("cannot read the stream to find events it already holds; republishing relies on its dedup window")
			return
		}
		id := m.Header.Get(HeaderMsgID)
		slotSeq, ok := want[id]
		if !ok {
			continue
		}
		delete(want, id)
		p.mu.Lock()
		if s := &p.ring[slotSeq&p.mask]; s.seq == slotSeq && s.state != acked && s.state != recording {
			p.storedLocked(s, reply{streamSeq: seq})
			found++
		}
		p.mu.Unlock()
	}
	if found > 0 {
		p.log.Info().Int("events", found).Msg("found events in the stream whose PubAck was lost: not republishing them")
	}
}

// recordDeadLetters writes the Postgres records of dead letters JetStream
// stored; each counts as settled once recorded. A failed write is retried
// on the next round.
func (p *Publisher) recordDeadLetters(ctx context.Context) {
	for {
		p.mu.Lock()
		if len(p.recordQ) == 0 {
			p.mu.Unlock()
			return
		}
		seq := p.recordQ[0]
		s := &p.ring[seq&p.mask]
		ev, reason := s.ev, s.deadLetter
		p.mu.Unlock()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := p.cfg.RecordDeadLetter(rctx, &ev, reason)
		cancel()
		if err != nil {
			if p.recordLogs.Allow() {
				p.log.Warn().Err(err).Str("event_id", ev.ID).Msg("cannot record a dead letter in Postgres yet; retrying (the relay does not confirm past it meanwhile)")
			}
			return
		}
		p.mu.Lock()
		p.recordQ = p.recordQ[1:]
		if s.seq == seq && s.state == recording {
			s.state = acked
			p.advanceLocked()
		}
		p.mu.Unlock()
	}
}

// refreshLimits rereads the stream's max_msg_size after it refused a
// message as too large: an operator lowered it since the relay started.
func (p *Publisher) refreshLimits(ctx context.Context) {
	p.mu.Lock()
	changed := p.limitsChanged
	p.limitsChanged = false
	p.mu.Unlock()
	if !changed || p.cfg.Stream == nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := p.cfg.Stream.Info(rctx)
	if err != nil {
		return
	}
	size := int(p.nc.MaxPayload())
	if m := int(info.Config.MaxMsgSize); m > 0 && (size <= 0 || m < size) {
		size = m
	}
	p.sendMu.Lock()
	p.maxSize = size
	p.sendMu.Unlock()
	p.log.Warn().Int("max_message_size", size).Msg("the stream refused a message as too large: using its current limit")
}
