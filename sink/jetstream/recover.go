package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/retry"
)

// Run expires PubAcks that take too long, notices dropped and replaced
// connections and drives recovery after failures. It returns when ctx ends.
func (p *Publisher) Run(ctx context.Context) error {
	status := p.nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED, nats.CONNECTED)
	defer p.nc.RemoveStatusListener(status)
	tick := time.NewTicker(p.tickInterval())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-status:
			p.connectionChanged()
		case <-tick.C:
			p.expire(time.Now())
		case <-p.fastTick():
			p.lingerCommit()
		case <-p.fastReady():
			p.sendQueued(false)
		case <-p.wake:
		}
		p.recordDeadLetters(ctx)
		if p.outage() {
			p.recover(ctx, status, tick.C)
		}
		p.sendIfDue()
	}
}

func (p *Publisher) tickInterval() time.Duration {
	return max(p.cfg.AckTimeout/10, 10*time.Millisecond)
}

// connectionChanged fails every message on the wire of a lost connection:
// their PubAcks, if any were sent, went to it and will never arrive. The
// change is reported late: when the client is connected again by then,
// the messages sent on the new connection are not touched.
func (p *Publisher) connectionChanged() {
	up := p.nc.IsConnected()
	conn := p.connection() // read after up: a reconnect before up shows here
	p.mu.Lock()
	defer p.mu.Unlock()
	p.connectionSeenLocked(conn)
	if up {
		return
	}
	for seq := p.head; seq < p.next; seq++ {
		if s := &p.ring[seq&p.mask]; s.state == sent {
			s.state = failed
			p.failLocked(ErrDisconnected, s)
		}
	}
}

// expire fails messages whose PubAck is overdue, and those sent on a
// connection that has since been replaced.
func (p *Publisher) expire(now time.Time) {
	conn := p.connection()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.connectionSeenLocked(conn)
	for seq := p.head; seq < p.next; seq++ {
		s := &p.ring[seq&p.mask]
		if s.state == sent && now.Sub(s.sentAt) > p.cfg.AckTimeout && !p.awaitsCommitLocked(s) {
			if s.batch.batched() && s.deadLetter == "" {
				p.failBatchLocked(s, ErrAckTimeout)
				continue
			}
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
			if !p.awaitEvent(ctx, status, tick) {
				return
			}
		}
		p.refreshLimits(ctx)
		err := p.reconcile(ctx)
		switch {
		case errors.Is(err, errConnectionLost):
			continue // wait for the connection, then read the stream again
		case err != nil && unanswered(err) && time.Since(started) < reconcileBudget:
			// JetStream does not answer reads yet (a stream leader being
			// elected after a crash): republishing now would store again,
			// past the dedup window, what the stream already holds.
			p.checkRoom(ctx)
			if logs.Allow() {
				p.log.Warn().Err(err).Int("attempt", attempt).Msg("cannot read the stream yet to find events it already holds; waiting before republishing")
			}
			if !p.sleep(ctx, backoff.Next()) {
				return
			}
			continue
		case err != nil:
			p.log.Warn().Err(err).Msg("cannot read the stream to find events it already holds; republishing relies on its dedup window")
		}
		if !p.quorate(ctx) {
			// Sent again now, the event would be one more proposal in a
			// leader's log that may commit them all once its servers
			// return: stored twice, past the dedup window.
			if logs.Allow() {
				p.log.Warn().Int("attempt", attempt).Dur("outage", time.Since(started).Round(time.Millisecond)).
					Msg("the stream has no quorum: not sending the event again until it has")
			}
			if !p.sleep(ctx, backoff.Next()) {
				return
			}
			continue
		}
		if p.probe(ctx, status, tick) {
			p.roomAgain()
			p.reconcileAfterProbe(ctx)
			p.resume(attempt, time.Since(started))
			return
		}
		p.mu.Lock()
		problem, last := p.problem, p.lastFailure
		p.mu.Unlock()
		var se *ServerError
		if errors.As(last, &se) && se.ErrCode == errCodeWrongLastSequence {
			// The guard refused the probe: the stream changed since it
			// was read (a late copy of the event, maybe). Read it again.
			p.log.Info().Msg("the first event's subject changed since the stream was read: reading it again before republishing")
			continue
		}
		p.checkRoom(ctx)
		if logs.Allow() {
			hint := Hint(last)
			if p.blocked != nil {
				hint = p.blocked.Fix
			}
			p.log.Warn().Err(problem).AnErr("latest", last).Int("attempt", attempt).Dur("outage", time.Since(started).Round(time.Millisecond)).
				Str("hint", hint).Msg("JetStream still not accepting the next event; retrying")
		}
		if !p.sleep(ctx, backoff.Next()) {
			return
		}
	}
}

// reconcileAfterProbe reads the stream once more once the probe is
// stored. A message whose PubAck timed out may still have been in the
// server's queue when reconcile read the stream, and stored after it:
// republished after the dedup window, it would be stored twice. The
// stream takes messages in the order they arrive (a clustered stream's
// leader proposes them in that order and applies them in log order), so
// once the probe, sent after every earlier message, is stored, every
// earlier one is stored or refused: this read sees them all.
func (p *Publisher) reconcileAfterProbe(ctx context.Context) {
	if err := p.reconcile(ctx); err != nil {
		p.log.Warn().Err(err).Msg("cannot read the stream again after the first event went through; republishing the rest relies on its dedup window")
	}
}

// sleep waits d, or less when ctx ends (then it reports false).
func (p *Publisher) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// reconcileBudget is how long recovery waits for JetStream to answer the
// reads that find what it already holds before it republishes anyway,
// relying on the stream's dedup window: a stream that cannot be read at
// all (a role without the permission) must not stop the relay forever.
const reconcileBudget = 2 * time.Minute

// Unanswered reports whether a JetStream request failed for want of an
// answer (timeouts, no responders, JetStream or the stream's leader not
// available for now): worth asking again later.
func Unanswered(err error) bool { return unanswered(err) }

// unanswered reports whether a stream read failed for want of an answer
// (timeouts, no responders, JetStream or the stream's leader not available
// for now) rather than for a reason that waiting does not cure.
func unanswered(err error) bool {
	var apiErr *natsjs.APIError
	if errors.As(err, &apiErr) {
		// 10008: JetStream system temporarily unavailable; 503: no
		// responders or no leader yet.
		return apiErr.ErrorCode == natsjs.JSErrCodeJetStreamNotEnabled || apiErr.ErrorCode == 10008 || apiErr.Code == 503
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, natsjs.ErrNoStreamResponse)
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
	if p.sendNext >= p.sendEndLocked() {
		p.mu.Unlock()
		return true
	}
	seq := p.sendNext
	s := &p.ring[seq&p.mask]
	ev, deadLetter := s.ev, s.deadLetter != "" || s.ev.Problem != ""
	p.mu.Unlock()

	guard := ""
	if !deadLetter {
		guard = p.subjectGuard(ctx, &ev)
	}
	if p.beforeProbe != nil {
		p.beforeProbe(&ev)
	}
	p.sendMu.Lock()
	p.probeGuard = guard
	p.sendMu.Unlock()
	p.sendQueued(true)
	for {
		p.mu.Lock()
		done := seq < p.head || p.ring[seq&p.mask].state != sent
		ok := seq < p.head || p.ring[seq&p.mask].state == acked
		p.mu.Unlock()
		if done {
			return ok
		}
		if !p.awaitEvent(ctx, status, tick) {
			return false
		}
	}
}

// subjectGuard returns the stream sequence of the last message on ev's
// subject, as a Nats-Expected-Last-Subject-Sequence for the probe ("" when
// it cannot be read: the probe then goes unguarded).
//
// The probe republishes the first unacknowledged event. Its first attempt
// may still have been in the server's queue when reconcile read the
// stream, and stored since: republished past the dedup window, it would
// be stored twice. Guarded, the probe is stored only if nothing reached
// its subject since this read; otherwise JetStream refuses it
// (errCodeWrongLastSequence) and recovery reads the stream again.
func (p *Publisher) subjectGuard(ctx context.Context, ev *decode.Event) string {
	if p.cfg.Stream == nil {
		return ""
	}
	subject := p.cfg.Subject.Render(ev)
	var last uint64
	err := p.request(ctx, func(ctx context.Context) error {
		m, err := p.cfg.Stream.GetLastMsgForSubject(ctx, subject)
		if errors.Is(err, natsjs.ErrMsgNotFound) {
			last = 0
			return nil
		}
		if err != nil {
			return err
		}
		last = m.Sequence
		return nil
	})
	if err != nil {
		p.log.Warn().Err(err).Str("subject", subject).Msg("cannot read the last message on the first event's subject: republishing it relies on the dedup window")
		return ""
	}
	return strconv.FormatUint(last, 10)
}

// awaitEvent waits during recovery for a connection change, a tick or a
// wake-up, handles it and records the dead letters due; false when ctx
// ends.
func (p *Publisher) awaitEvent(ctx context.Context, status <-chan nats.Status, tick <-chan time.Time) bool {
	select {
	case <-ctx.Done():
		return false
	case <-status:
		p.connectionChanged()
	case now := <-tick:
		p.expire(now)
	case <-p.wake:
	}
	p.recordDeadLetters(ctx)
	return true
}

// resume ends the outage and sends everything still unacknowledged.
func (p *Publisher) resume(attempts int, outage time.Duration) {
	p.mu.Lock()
	p.healthy = true
	problem := p.problem
	p.problem, p.lastFailure = nil, nil
	p.sendNext = p.head
	pending := p.next - p.head
	p.mu.Unlock()
	p.log.Info().AnErr("after", problem).Int("attempts", attempts).Dur("outage", outage.Round(time.Millisecond)).
		Uint64("republishing", pending).Msg("JetStream accepts events again; republishing in order")
	p.sendQueued(false)
}

// requestTries bounds the tries of one stream request during recovery;
// each try gets Config.AckTimeout.
const requestTries = 3

// errConnectionLost ends a stream request whose connection dropped: its
// reply, if any, went to the old connection and will never arrive.
var errConnectionLost = errors.New("connection to NATS lost during a stream request")

// whileConnected returns a context that ends with ctx or, with cause
// errConnectionLost, as soon as the connection drops. Call stop when done.
func (p *Publisher) whileConnected(ctx context.Context) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	status := p.nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED)
	go func() {
		if _, ok := <-status; ok {
			cancel(errConnectionLost)
		}
	}()
	return ctx, func() {
		p.nc.RemoveStatusListener(status)
		cancel(nil)
	}
}

// request runs one JetStream API request of the recovery path. JetStream
// drops requests without a reply at times (while it stops, for one), so
// each try ends after Config.AckTimeout, and a failed try is repeated,
// up to requestTries times; none once ctx ended (the connection dropped:
// the cause is errConnectionLost).
func (p *Publisher) request(ctx context.Context, fn func(context.Context) error) error {
	for try := 1; ; try++ {
		tctx, cancel := context.WithTimeout(ctx, p.cfg.AckTimeout)
		err := fn(tctx)
		cancel()
		switch {
		case err == nil || errors.Is(err, natsjs.ErrMsgNotFound):
			return err
		case ctx.Err() != nil:
			return context.Cause(ctx)
		case try == requestTries:
			return err
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(time.Duration(try) * 100 * time.Millisecond):
		}
	}
}

// streamInfo reads the stream's info, retried as request retries.
func (p *Publisher) streamInfo(ctx context.Context) (info *natsjs.StreamInfo, err error) {
	err = p.request(ctx, func(ctx context.Context) (err error) {
		info, err = p.cfg.Stream.Info(ctx)
		return err
	})
	return info, err
}

// reconcile looks in the stream, before anything is republished, for the
// unacknowledged events it already holds: their PubAcks were lost with a
// connection, or timed out. Those count as stored and are not sent again,
// so an outage longer than the stream's dedup window leaves no duplicates.
// Dead letters are looked for in the stream that holds the dead-letter
// subject. It returns errConnectionLost when the connection dropped
// meanwhile: recovery then waits for it and starts over.
func (p *Publisher) reconcile(ctx context.Context) error {
	if p.cfg.Stream == nil {
		return nil
	}
	p.mu.Lock()
	from := max(p.lastStreamSeq, p.cfg.StartSeq) + 1
	deadStream, deadFrom := p.deadStream, p.deadSeq+1
	events, dead := map[string]uint64{}, map[string]uint64{}
	for seq := p.head; seq < p.next; seq++ {
		s := &p.ring[seq&p.mask]
		if s.attempt == 0 || s.state == acked || s.state == recording {
			continue
		}
		if s.deadLetter != "" || s.ev.Problem != "" {
			dead[contract.DeadLetterMsgID(p.deadLetterID(&s.ev, s.seq))] = seq
		} else {
			events[s.ev.MsgID()] = seq
		}
	}
	p.mu.Unlock()
	if len(events)+len(dead) == 0 {
		return nil
	}
	ctx, stop := p.whileConnected(ctx)
	defer stop()
	info, err := p.streamInfo(ctx)
	if err != nil {
		return p.notReconciled(err)
	}
	p.mu.Lock()
	if p.streamName == "" {
		p.streamName = info.Config.Name
	}
	p.mu.Unlock()
	if deadStream == "" && coveredBy(info.Config.Subjects, p.cfg.DeadLetterSubject) {
		for id, seq := range dead {
			events[id] = seq
		}
		dead = nil
	}
	// Others may publish to the stream too: read a bounded number of messages.
	last := min(info.State.LastSeq, from+uint64(4*len(p.ring)))
	found, err := p.findStored(ctx, p.cfg.Stream, info.Config.Name, "", from, last, events)
	if err == nil && len(dead) > 0 {
		var n int
		n, err = p.findDeadLetters(ctx, deadStream, deadFrom, dead)
		found += n
	}
	if found > 0 {
		p.log.Info().Int("events", found).Msg("found events in the stream whose PubAck was lost: not republishing them")
	}
	if err != nil {
		return p.notReconciled(err)
	}
	return nil
}

func (p *Publisher) notReconciled(err error) error {
	return fmt.Errorf("read the stream for events it already holds: %w", err)
}

// findDeadLetters looks for the dead letters in want in the stream that
// holds the dead-letter subject when that is not Config.Stream: from
// sequence from on, or, when no dead letter's PubAck came from it yet
// (from is 1), among its newest messages.
func (p *Publisher) findDeadLetters(ctx context.Context, name string, from uint64, want map[string]uint64) (int, error) {
	js, err := natsjs.New(p.nc)
	if err != nil {
		return 0, err
	}
	if name == "" {
		err = p.request(ctx, func(ctx context.Context) (err error) {
			name, err = js.StreamNameBySubject(ctx, p.cfg.DeadLetterSubject)
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("look up the stream of the dead-letter subject %q: %w", p.cfg.DeadLetterSubject, err)
		}
	}
	var info *natsjs.StreamInfo
	err = p.request(ctx, func(ctx context.Context) error {
		if p.deadLetters == nil || p.deadLetters.CachedInfo().Config.Name != name {
			stream, err := js.Stream(ctx, name)
			if err != nil {
				return err
			}
			p.deadLetters, info = stream, stream.CachedInfo()
			return nil
		}
		info, err = p.deadLetters.Info(ctx)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("read dead-letter stream %q: %w", name, err)
	}
	bound := uint64(4 * len(p.ring))
	if from <= 1 && info.State.LastSeq > bound {
		from = info.State.LastSeq - bound + 1
	}
	return p.findStored(ctx, p.deadLetters, name, p.cfg.DeadLetterSubject, from, min(info.State.LastSeq, from+bound), want)
}

// findStored reads stream from sequence from through last (only the
// messages on subject, when set) and settles the unacknowledged messages
// in want (Nats-Msg-Id to sequence number) it finds there. It returns how
// many it settled.
func (p *Publisher) findStored(ctx context.Context, stream natsjs.Stream, name, subject string, from, last uint64, want map[string]uint64) (int, error) {
	found := 0
	var opts []natsjs.GetMsgOpt
	if subject != "" {
		opts = append(opts, natsjs.WithGetMsgSubject(subject))
	}
	for seq := from; seq <= last && len(want) > 0; seq++ {
		var m *natsjs.RawStreamMsg
		err := p.request(ctx, func(ctx context.Context) (err error) {
			m, err = stream.GetMsg(ctx, seq, opts...)
			return err
		})
		if errors.Is(err, natsjs.ErrMsgNotFound) {
			if subject != "" {
				break // nothing on subject from seq on
			}
			continue
		}
		if err != nil {
			return found, err
		}
		seq = m.Sequence // with a subject, the first match at or after seq
		if seq > last {
			break
		}
		id := m.Header.Get(contract.HeaderMsgID)
		slotSeq, ok := want[id]
		if !ok {
			continue
		}
		delete(want, id)
		p.mu.Lock()
		if s := &p.ring[slotSeq&p.mask]; s.seq == slotSeq && s.state != acked && s.state != recording {
			p.storedLocked(s, reply{stream: []byte(name), streamSeq: seq})
			found++
		}
		p.mu.Unlock()
	}
	return found, nil
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
		err := p.cfg.RecordDeadLetter(rctx, &ev, p.deadLetterID(&ev, seq), reason)
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
	ctx, stop := p.whileConnected(ctx)
	defer stop()
	info, err := p.streamInfo(ctx)
	if err != nil {
		p.mu.Lock()
		p.limitsChanged = true // read them on the next round
		p.mu.Unlock()
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
