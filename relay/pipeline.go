package relay

import (
	"context"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/startup"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/sink"
)

// pipeline joins the replication stream to the sink and the checkpoint:
// it skips events already handed over (Postgres replays after a
// reconnect), numbers the rest through the publisher, and answers "what is
// safe to confirm" from the publisher's acknowledgements.
type pipeline struct {
	pub     sink.Destination
	tracker *checkpoint.Tracker
	ledger  *checkpoint.Ledger
	// gate clears positions for confirmation (the ledger written, the
	// publication checked) without blocking the replication goroutine.
	gate *checkpoint.Gate
	// held are the events of the replay the destination held when the
	// current replication session started.
	held    *checkpoint.Holdings
	skipped prometheus.Counter
	// source is where the relay's messages come from; set once the slot
	// is taken up (nil before: nothing is read back as the relay's).
	source *source
	// batchStart is when the first event of the open transaction
	// (committing at batchLSN) was decoded; zero when it has none to
	// publish. Its COMMIT ends the batch (Publisher.EndBatch).
	batchStart time.Time
	batchLSN   pglogrepl.LSN
	// trace times the start-up until the first PubAck (nil: not traced);
	// from is where the latest session started reading.
	trace *startup.Trace
	from  pglogrepl.LSN
}

// skip reports whether ev was handed over already or is stored already.
func (p *pipeline) skip(ev *decode.Event) bool {
	if p.tracker.Seen(ev.Position) || p.storedAlready(ev) {
		p.skipped.Inc()
		return true
	}
	return false
}

// storedAlready reports whether the destination holds ev (see
// checkpoint.Holdings). Another event at its position is noted: ev is
// published.
func (p *pipeline) storedAlready(ev *decode.Event) bool {
	held, other := p.held.Holds(ev)
	if other != "" {
		p.source.otherEventAt(ev, other)
	}
	return held
}

func (p *pipeline) Event(ev *decode.Event) bool {
	if p.skip(ev) {
		return true
	}
	if p.batchStart.IsZero() || ev.Position.CommitLSN != p.batchLSN {
		p.batchStart, p.batchLSN = time.Now(), ev.Position.CommitLSN
	}
	seq, ok := p.pub.Offer(ev)
	if !ok {
		return false
	}
	p.tracker.Handed(ev.Position, seq)
	return true
}

func (p *pipeline) Room() <-chan struct{} { return p.pub.Room() }

func (p *pipeline) Commit(end pglogrepl.LSN) {
	p.tracker.Commit(end)
	if !p.batchStart.IsZero() {
		p.pub.EndBatch(p.batchStart)
		p.batchStart = time.Time{}
	}
}

func (p *pipeline) Idle(walEnd pglogrepl.LSN) {
	p.tracker.Idle(walEnd)
	// A keepalive beyond where the session started, with nothing awaiting
	// a PubAck: what was read held nothing to publish (the walsender
	// sends one at the start position too, before reading anything).
	if !p.trace.Done() && walEnd > p.from && p.pub.Pending() == 0 {
		p.trace.Finish("read past the start with nothing to publish")
	}
}

func (p *pipeline) Flushed(ctx context.Context, final bool) (pglogrepl.LSN, error) {
	flushed := p.tracker.Flushed(p.pub.AckedThrough())
	if final {
		return p.gate.Final(ctx, flushed), nil
	}
	return p.gate.Allow(flushed)
}

func (p *pipeline) Drain(ctx context.Context) error { return p.pub.Drain(ctx) }

// followTimeline takes the server's identity as a session found it
// (source.refresh). On a new timeline nothing of the old one is confirmed
// beyond the fork point: keepalives had moved the tracker's confirm point
// and the gate's allowance past the last event (which refresh checked is
// before the fork), and the new timeline writes other transactions at
// those positions. Confirming them would make the next session skip those
// transactions. Runs before the session reads: the replication goroutine
// waits for it.
func (p *pipeline) followTimeline(start replication.SessionStart) error {
	fork, forked, err := p.source.refresh(start, p.tracker.Last().CommitLSN)
	if err != nil || !forked {
		return err
	}
	p.tracker.Fork(fork)
	p.gate.Rewind(fork)
	return nil
}

// publish hands ev over, waiting for room; used for the rows published at
// the slot's creation, before streaming starts.
func (p *pipeline) publish(ctx context.Context, ev *decode.Event) error {
	if p.skip(ev) {
		return nil
	}
	seq, err := p.pub.Publish(ctx, ev)
	if err != nil {
		return err
	}
	p.tracker.Handed(ev.Position, seq)
	return nil
}
