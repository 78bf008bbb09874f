package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// The seed article's polling relay, for comparison: a transaction selects
// up to 100 unprocessed rows FOR UPDATE SKIP LOCKED, publishes each one and
// waits for its PubAck, marks it processed, commits; once per one-second
// tick ("as written"), or in a loop until the table is empty on each tick.
// It lives in the benchmark only.

type pollResult struct {
	key    string // its figures' key prefix in the JSON report (figures.go)
	mode   string
	events int
	took   time.Duration
}

func (b *bench) polling(ctx context.Context, sc scenario, loop bool, budget time.Duration) (pollResult, error) {
	stream := "BENCH_POLL_" + sc.stream
	if _, err := b.js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"bench_poll_" + sc.name + ".>"}, Storage: jetstream.FileStorage}); err != nil {
		return pollResult{}, err
	}
	defer b.js.DeleteStream(context.WithoutCancel(ctx), stream)
	// Each mode starts from the whole table unprocessed.
	if _, err := b.pool.Exec(ctx, `UPDATE `+sc.table.Quoted()+` SET processed_at = NULL, attempts = 0`); err != nil {
		return pollResult{}, err
	}
	r := pollResult{key: "r4.article_tick", mode: "one batch per tick (as written)"}
	if loop {
		r.key, r.mode = "r4.article_loop", "loop until empty on each tick"
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	started := time.Now()
	for time.Since(started) < budget {
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-tick.C:
		}
		for {
			n, err := b.pollBatch(ctx, sc, "bench_poll_"+sc.name)
			if err != nil {
				return r, err
			}
			r.events += n
			if !loop || n == 0 || time.Since(started) >= budget {
				break
			}
		}
		left, err := b.unprocessed(ctx, sc)
		if err != nil {
			return r, err
		}
		if left == 0 {
			break
		}
	}
	r.took = time.Since(started)
	return r, nil
}

// pollBatch is the seed article's processBatch.
func (b *bench) pollBatch(ctx context.Context, sc scenario, prefix string) (int, error) {
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	rows, err := tx.Query(ctx, `SELECT id::text, aggregate_type, aggregate_id, event_type, payload::text FROM `+sc.table.Quoted()+`
		WHERE processed_at IS NULL AND attempts < 5 ORDER BY created_at LIMIT 100 FOR UPDATE SKIP LOCKED`)
	if err != nil {
		return 0, err
	}
	type row struct{ ID, AggType, AggID, EvType, Payload string }
	batch, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		return 0, err
	}
	for _, e := range batch {
		msg := &nats.Msg{Subject: prefix + ".order", Data: []byte(e.Payload), Header: nats.Header{}}
		msg.Header.Set(contract.HeaderMsgID, e.ID)
		if _, err := b.js.PublishMsg(ctx, msg); err != nil {
			if _, err := tx.Exec(ctx, `UPDATE `+sc.table.Quoted()+` SET attempts = attempts + 1 WHERE id = $1`, e.ID); err != nil {
				return 0, err
			}
			continue
		}
		if _, err := tx.Exec(ctx, `UPDATE `+sc.table.Quoted()+` SET processed_at = NOW() WHERE id = $1`, e.ID); err != nil {
			return 0, fmt.Errorf("mark processed: %w", err)
		}
	}
	return len(batch), tx.Commit(ctx)
}

func (b *bench) unprocessed(ctx context.Context, sc scenario) (int, error) {
	var n int
	err := b.pool.QueryRow(ctx, `SELECT count(*) FROM `+sc.table.Quoted()+` WHERE processed_at IS NULL`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count unprocessed rows: %w", err)
	}
	return n, nil
}

// pollRelay runs outbox-relay --source poll on the same rows, all
// unprocessed again, from its process start until every row is processed,
// then checks the table against its stream.
func (b *bench) pollRelay(ctx context.Context, sc scenario) (pollResult, error) {
	// What `migrate --source poll` adds; the WAL runs before did without.
	if err := migrations.InstallPoll(ctx, b.pool.Config().ConnConfig, migrations.Names{Table: sc.table, Publication: sc.publication}); err != nil {
		return pollResult{}, err
	}
	if _, err := b.pool.Exec(ctx, `UPDATE `+sc.table.Quoted()+` SET processed_at = NULL, attempts = 0, retry_after = NULL`); err != nil {
		return pollResult{}, err
	}
	n, err := b.unprocessed(ctx, sc)
	if err != nil {
		return pollResult{}, err
	}
	r := pollResult{key: "r4.source_poll", mode: "outbox-relay --source poll (batches of 500, PubAcks pipelined)", events: n}
	started := time.Now()
	relay, err := startChild(b.cfg.Self, append(b.relayArgs(sc), "--source", "poll"), b.dir+"/relay-"+sc.name+"-poll.log")
	if err != nil {
		return r, err
	}
	for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		left, err := b.unprocessed(ctx, sc)
		if err == nil && left == 0 {
			break
		}
		if err == nil && time.Now().After(deadline) {
			err = fmt.Errorf("the polling relay left %d of %d rows unprocessed after 10 minutes", left, n)
		}
		if err != nil {
			_ = relay.stop()
			return r, err
		}
	}
	r.took = time.Since(started)
	if err := relay.stop(); err != nil {
		return r, fmt.Errorf("polling relay exit: %w", err)
	}
	stream, err := b.js.Stream(ctx, sc.stream)
	if err != nil {
		return r, err
	}
	return r, b.check(ctx, sc, stream)
}
