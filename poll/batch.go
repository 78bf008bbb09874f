package poll

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/sink"
)

// batcher runs one batch at a time; Poller.loop owns it.
type batcher struct {
	p    *Poller
	pool *pgxpool.Pool
	pub  sink.Destination
	// stored reads back what the stream holds: the messages of every
	// relay (a batch that did not commit may have been another
	// instance's).
	stored sink.Reader
	// record lists a dead letter in Postgres, as the publisher does
	// (core.RecordDeadLetter).
	record func(ctx context.Context, ev *decode.Event, stored, reason string) error
}

// row is a pending row read in a batch.
type row struct {
	ctid     string // stable while the batch holds the row lock
	ev       decode.Event
	attempts int  // failed attempts so far
	waiting  bool // retry_after is still ahead
	seq      uint64
	dead     bool // gave up: goes to the dead-letter subject
	// found is the message the stream holds for the row, published by a
	// batch that ended without its commit; nil when none is known.
	found *sink.StoredEvent
}

// rejection is a row put back for a later try.
type rejection struct {
	r      *row
	reason string
	wait   time.Duration
}

// run runs one batch and returns how many rows it settled, and whether it
// was full (more rows may be waiting).
func (b *batcher) run(ctx context.Context) (n int, full bool, err error) {
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("begin a polling batch: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	types, ids, err := b.lockAggregates(ctx, tx)
	if err != nil || len(types) == 0 {
		return 0, false, err
	}
	rows, err := b.read(ctx, tx, types, ids)
	if err != nil {
		return 0, false, err
	}
	full = len(types) == b.p.cfg.Batch || b.anyShareFull(rows, len(types))
	take, rejects := b.plan(rows)
	take, found, claims, err := b.skipStored(ctx, tx, take)
	if err != nil {
		return 0, false, err
	}
	if err := b.recordFound(ctx, found); err != nil {
		return 0, false, err
	}
	if len(take) > 0 {
		id, err := b.claim(ctx, take)
		if err != nil {
			return 0, false, err
		}
		claims = append(claims, id)
	}
	done := append(found, b.publish(ctx, take)...)
	if err := b.settle(ctx, tx, done, rejects, claims); err != nil {
		return 0, false, err
	}
	return len(done) + len(rejects), full, nil
}

// lockAggregates takes the advisory locks of up to Batch aggregates with
// ready rows, skipping those another instance holds.
func (b *batcher) lockAggregates(ctx context.Context, tx pgx.Tx) (types, ids []string, err error) {
	rows, err := tx.Query(ctx, b.p.q.lockAggregates, 4*b.p.cfg.Batch, b.p.class, b.p.cfg.Batch)
	if err != nil {
		return nil, nil, fmt.Errorf("lock aggregates of %s: %w", b.p.cfg.Table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var t, id string
		if err := rows.Scan(&t, &id); err != nil {
			return nil, nil, fmt.Errorf("lock aggregates of %s: %w", b.p.cfg.Table, err)
		}
		types, ids = append(types, t), append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("lock aggregates of %s: %w", b.p.cfg.Table, err)
	}
	return types, ids, nil
}

// share is how many rows of each of n aggregates a batch reads.
func (b *batcher) share(n int) int { return (b.p.cfg.Batch + n - 1) / n }

// anyShareFull reports whether an aggregate gave all the rows it could:
// it may have more waiting.
func (b *batcher) anyShareFull(rows []row, aggregates int) bool {
	share := b.share(aggregates)
	per := map[[2]string]int{}
	for _, r := range rows {
		agg := [2]string{r.ev.AggregateType, r.ev.AggregateID}
		if per[agg]++; per[agg] >= share {
			return true
		}
	}
	return false
}

// read locks and reads the pending rows of the aggregates held, in order.
// Its snapshot is taken after the advisory locks, so it sees every commit
// of the instance that held an aggregate before.
func (b *batcher) read(ctx context.Context, tx pgx.Tx, types, ids []string) ([]row, error) {
	rows, err := tx.Query(ctx, b.p.q.pendingRows, types, ids, b.share(len(types)))
	if err != nil {
		return nil, fmt.Errorf("read pending rows of %s: %w", b.p.cfg.Table, err)
	}
	defer rows.Close()
	var out []row
	for rows.Next() {
		v := rows.RawValues()
		r := row{ctid: string(v[0]), waiting: string(v[8]) == "true"}
		if r.attempts, err = strconv.Atoi(string(v[7])); err != nil {
			return nil, fmt.Errorf("read pending rows of %s: attempts %q: %w", b.p.cfg.Table, v[7], err)
		}
		r.ev = decode.NewEvent(decode.Fields{
			ID: v[1], AggregateType: v[2], AggregateID: v[3], EventType: v[4], Payload: v[5], CreatedAt: v[6], Headers: v[12],
			PayloadIsBytea: b.p.byteaPayload, HasCreatedAt: true,
		}, decode.Position{Index: uint32(len(out))})
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read pending rows of %s: %w", b.p.cfg.Table, err)
	}
	return out, nil
}

// plan picks the rows to publish, in order. An aggregate stops at its
// first row that waits for a retry or is rejected now: its later rows
// must not overtake it. A row rejected for the last time goes to the
// dead-letter subject, with the reason, and its aggregate flows on.
func (b *batcher) plan(rows []row) (take []*row, rejects []rejection) {
	blocked := map[[2]string]bool{}
	for i := range rows {
		r := &rows[i]
		agg := [2]string{r.ev.AggregateType, r.ev.AggregateID}
		if blocked[agg] {
			continue
		}
		if r.waiting {
			blocked[agg] = true
			continue
		}
		if reason := b.pub.Rejects(&r.ev); reason != "" {
			attempt := r.attempts + 1
			if attempt < b.p.cfg.MaxAttempts {
				blocked[agg] = true
				rejects = append(rejects, rejection{r: r, reason: reason, wait: Delay(attempt, b.p.cfg.Backoff, b.p.cfg.MaxBackoff)})
				continue
			}
			r.dead = true
			r.ev.Problem = fmt.Sprintf("%s (gave up after %d attempts)", reason, attempt)
		}
		take = append(take, r)
	}
	return take, rejects
}

// publish offers the rows in order and waits for their PubAcks; it returns
// the rows JetStream stored. When ctx ends it stops offering and waits up
// to the drain timeout for the rest.
func (b *batcher) publish(ctx context.Context, take []*row) []*row {
	started := time.Now()
	offered := 0
	for _, r := range take {
		if ctx.Err() != nil {
			break
		}
		seq, err := b.pub.Publish(ctx, &r.ev)
		if err != nil {
			break
		}
		r.seq = seq
		offered++
	}
	take = take[:offered]
	if offered == 0 {
		return nil
	}
	// outbox_batch_duration_seconds: the batch, from its first publish to
	// its last PubAck.
	b.pub.EndBatch(started)
	dctx, cancel := drainContext(ctx, b.p.drainTimeout())
	defer cancel()
	if err := b.pub.Drain(dctx); err != nil {
		b.p.log.Warn().Err(err).Msg("stopping before every PubAck of the batch arrived: the rest stays pending and is published again")
	}
	acked := b.pub.AckedThrough()
	for i, r := range take {
		if r.seq > acked {
			return take[:i]
		}
	}
	return take
}

// settle marks the stored rows processed and the rejected ones for a
// later try, releases the claims on the rows settled, and commits: the
// locks go with the commit. Rows published but not acknowledged (a stop
// that outwaited the drain timeout) stay claimed.
func (b *batcher) settle(ctx context.Context, tx pgx.Tx, done []*row, rejects []rejection, claims []int64) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var ctids, ids []string
	for _, r := range done {
		ids = append(ids, r.ev.ID)
		if r.dead {
			if _, err := tx.Exec(ctx, b.p.q.reject, r.ctid, r.ev.Problem, 0.0, true); err != nil {
				return fmt.Errorf("mark dead letter %s: %w", r.ev.ID, err)
			}
			continue
		}
		ctids = append(ctids, r.ctid)
	}
	for _, j := range rejects {
		b.p.metrics.rejected.Inc()
		b.p.log.Warn().Str("event_id", j.r.ev.ID).Str("aggregate_id", j.r.ev.AggregateID).Int("attempt", j.r.attempts+1).
			Int("max_attempts", b.p.cfg.MaxAttempts).Dur("retry_in", j.wait).Str("reason", j.reason).
			Msg("the stream cannot take the event as it is: its aggregate waits, then it is tried again")
		if _, err := tx.Exec(ctx, b.p.q.reject, j.r.ctid, j.reason, j.wait.Seconds(), false); err != nil {
			return fmt.Errorf("count a failed attempt at %s: %w", j.r.ev.ID, err)
		}
	}
	if len(ctids) > 0 {
		if _, err := tx.Exec(ctx, b.p.q.markProcessed, ctids); err != nil {
			return fmt.Errorf("mark %d rows processed: %w", len(ctids), err)
		}
	}
	if len(claims) > 0 {
		if _, err := tx.Exec(ctx, b.p.cq.release, claims, ids); err != nil {
			return fmt.Errorf("release the claims on %d rows: %w", len(ids), err)
		}
		if _, err := tx.Exec(ctx, b.p.cq.drop, claims); err != nil {
			return fmt.Errorf("release the claims on %d rows: %w", len(ids), err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit a polling batch of %d rows (they are published again): %w", len(done), err)
	}
	return nil
}

// drainContext is a context that ends d after ctx ends (never before).
// The goroutine AfterFunc starts ends with the returned cancel at the
// latest.
func drainContext(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-dctx.Done():
		}
	})
	return dctx, func() {
		stop()
		cancel()
	}
}
