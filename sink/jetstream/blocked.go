package jetstream

import (
	"context"
	"errors"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/decode"
)

// checkRoom runs during recovery, after JetStream refused or did not
// answer the next event: it reads the stream (and, for a quota, its
// account) to name what keeps it from storing the event, if room is what
// it lacks, and says so in the log and outbox_relay_stream_blocked. A
// refusal names the limit; a silence (a timeout, no responders) is named
// only when the stream's cluster shows a lost quorum. What cannot be named
// now leaves the last finding until recovery ends.
func (p *Publisher) checkRoom(ctx context.Context) {
	if p.cfg.Stream == nil {
		return
	}
	p.mu.Lock()
	latest, name := p.lastFailure, p.streamName
	var need uint64
	if p.head < p.next {
		need = uint64(len(p.ring[p.head&p.mask].ev.Payload))
	}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.AckTimeout)
	defer cancel()
	info, err := p.cfg.Stream.Info(ctx)
	if err == nil && name == "" {
		name = info.Config.Name
	}
	var b *Blocked
	switch {
	case err != nil:
		if b = unavailable(name, err); b == nil && noRoom(latest) {
			b = roomRefused(latest, nil, nil, name, need)
		}
	case noRoom(latest):
		b = roomRefused(latest, info, p.accountInfo(ctx, latest), name, need)
	default:
		b = quorum(info)
	}
	if b != nil {
		p.setBlocked(b)
	}
}

// accountInfo reads the account's JetStream use when err is a refusal for
// the account's quota; nil otherwise, or when it cannot be read.
func (p *Publisher) accountInfo(ctx context.Context, err error) *natsjs.AccountInfo {
	var se *ServerError
	if !errors.As(err, &se) || se.ErrCode != errCodeAccountResources {
		return nil
	}
	js, jerr := natsjs.New(p.nc)
	if jerr != nil {
		return nil
	}
	info, ierr := js.AccountInfo(ctx)
	if ierr != nil {
		return nil
	}
	return info
}

// setBlocked records what keeps the stream from storing the next event:
// in the metric, and in the log when it is new or another reason than
// before.
func (p *Publisher) setBlocked(b *Blocked) {
	prev := p.blocked
	p.blocked = b
	if prev != nil && prev.Reason == b.Reason && prev.Stream == b.Stream {
		return
	}
	if prev == nil {
		p.blockedSince = time.Now()
	} else if prev.Stream != b.Stream {
		p.metrics.setBlocked(prev.Stream, "")
	}
	p.metrics.setBlocked(b.Stream, b.Reason)
	p.mu.Lock()
	var ev decode.Event
	if p.head < p.next {
		ev = p.ring[p.head&p.mask].ev
	}
	waiting := p.next - p.head
	p.mu.Unlock()
	p.log.Error().Str("stream", b.Stream).Str("reason", b.Reason).Str("limit", b.What).Str("fix", b.Fix).
		Str("event_id", ev.ID).Str("lsn", formatLSN(ev.Position.CommitLSN)).Uint64("waiting", waiting).
		Msg("the stream has no room for the next event: the relay holds it and every event after it, confirms nothing past them, and retries until there is room")
}

// roomAgain ends a block once the stream stored the next event.
func (p *Publisher) roomAgain() {
	b := p.blocked
	if b == nil {
		return
	}
	p.blocked = nil
	p.metrics.setBlocked(b.Stream, "")
	p.log.Info().Str("stream", b.Stream).Str("reason", b.Reason).Dur("blocked_for", time.Since(p.blockedSince).Round(time.Millisecond)).
		Msg("the stream has room again")
}

// readable returns nil when the stream has a leader with its quorum and,
// in a cluster, JetStream has its meta leader, so that the take-up can
// read the stream; otherwise the Blocked that says why not (Open then
// waits, as for a JetStream that does not answer).
func readable(ctx context.Context, js natsjs.JetStream, stream natsjs.Stream) error {
	info := stream.CachedInfo()
	if b := quorum(info); b != nil {
		return b
	}
	if info.Cluster == nil {
		return nil
	}
	// Reads of a clustered stream need the meta leader too.
	if _, err := js.AccountInfo(ctx); err != nil {
		if b := unavailable(info.Config.Name, err); b != nil {
			return b
		}
	}
	return nil
}

// quorate reports whether the next event may be sent again: always,
// unless the stream is replicated, the failure was a silence (a timeout,
// no responders, a lost connection) rather than a refusal, and the stream
// shows no leader that heard from a quorum of its replicas within half
// the ack timeout. A leader that lost its quorum keeps the proposals it
// cannot commit, and commits them all if it is elected again when its
// servers return: an event sent once per retry would be stored once per
// retry, however short the dedup window (JetStream checks duplicates
// before it proposes, not when it applies). The event sent after a
// silence went out at least an ack timeout ago, so replicas lost since
// then have been silent for longer than half of it. The finding is the
// block's: in the log and outbox_relay_stream_blocked.
func (p *Publisher) quorate(ctx context.Context) bool {
	p.mu.Lock()
	latest, name := p.lastFailure, p.streamName
	p.mu.Unlock()
	if p.cfg.Stream == nil || p.replicas <= 1 {
		return true
	}
	if noRoom(latest) {
		return true // refused, not proposed
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.AckTimeout)
	defer cancel()
	info, err := p.cfg.Stream.Info(ctx)
	if err != nil {
		if b := unavailable(name, err); b != nil {
			p.setBlocked(b)
			return false
		}
		return true // reconcile waited for answers already
	}
	if b := quorumWithin(info, p.cfg.AckTimeout/2); b != nil {
		p.setBlocked(b)
		return false
	}
	return true
}
