package retention

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/progress"
)

// confirmed is the condition that the event of outbox row o is stored and
// the row is not a dead letter awaiting `dlq retry`. Named arguments:
// @h32, the mark's horizon as a 32-bit transaction id.
//
// o.xmin is the inserting transaction (or the last updater's, later, which
// only delays). It precedes the horizon when (h32 - xmin) mod 2^32 is in
// [1, 2^31): Postgres' own comparison of 32-bit transaction ids, exact for
// every row not yet frozen. A frozen row more than 2^31 transactions old
// may compare as newer and is then kept, never deleted too early. xmin 2
// (frozen, before 9.4) and 1 (bootstrap) are older than everything.
func (c *cleaner) confirmed() string {
	notDead := ` AND NOT EXISTS (SELECT 1 FROM ` + c.deadLetters + ` d WHERE d.event_id = ` + c.deadKey + ` AND d.retried_at IS NULL)`
	if c.cfg.ProcessedOnly {
		return `o.processed_at IS NOT NULL` + notDead
	}
	cond := `(o.xmin::text::bigint < 3
		OR (@h32::bigint - o.xmin::text::bigint + 4294967296) % 4294967296 BETWEEN 1 AND 2147483647`
	if c.hasProcessedAt {
		cond += ` OR o.processed_at IS NOT NULL`
	}
	return cond + `)` + notDead
}

// deleteSQL deletes one batch of confirmed rows older than @cutoff. The
// condition is repeated on the rows deleted: a row changed since the
// batch was chosen is checked again as it is now.
func (c *cleaner) deleteSQL() string {
	where := `o.created_at < @cutoff AND ` + c.confirmed()
	return `WITH batch AS (SELECT o.id FROM ` + c.table + ` o WHERE ` + where + ` LIMIT @batch)
		DELETE FROM ` + c.table + ` o WHERE o.id IN (SELECT id FROM batch) AND ` + where
}

// markSQL sets processed_at on one batch of confirmed rows without it.
// The batch is read in created_at order, through the seed's partial index
// on unprocessed rows: rows marked by earlier batches are no longer in it,
// where a scan of the table would pass over them again in every batch.
func (c *cleaner) markSQL() string {
	where := `o.processed_at IS NULL AND ` + c.confirmed()
	return `WITH batch AS (SELECT o.id FROM ` + c.table + ` o WHERE ` + where + ` ORDER BY o.created_at LIMIT @batch)
		UPDATE ` + c.table + ` o SET processed_at = now() WHERE o.id IN (SELECT id FROM batch) AND ` + where
}

// batches runs one batch statement, each in its own transaction, until a
// batch affects fewer rows than Batch, and returns the rows affected;
// Config.Progress is shown them as msg.
func (c *cleaner) batches(ctx context.Context, msg, sql string, cutoff time.Time) (int64, error) {
	args := c.args(cutoff)
	var total int64
	var prog *progress.Meter
	if c.cfg.Progress != nil {
		prog = progress.NewTo(msg, 0, c.cfg.Progress)
		defer prog.Every(ctx, 0)()
	}
	for {
		start := time.Now()
		tag, err := c.pool.Exec(ctx, sql, args)
		if err != nil {
			return total, err
		}
		n := tag.RowsAffected()
		total += n
		if prog != nil {
			prog.AddN(n)
		}
		c.log.Debug().Int64("rows", n).Dur("took", time.Since(start)).Msg("batch")
		if n < int64(c.cfg.Batch) {
			return total, nil
		}
	}
}

func (c *cleaner) args(cutoff time.Time) pgx.NamedArgs {
	args := pgx.NamedArgs{"cutoff": cutoff, "batch": c.cfg.Batch}
	if !c.cfg.ProcessedOnly {
		args["h32"] = c.mark.horizon32()
	}
	return args
}

// dryRun counts what a run would do.
func (c *cleaner) dryRun(ctx context.Context, rep *Report) error {
	dead := `EXISTS (SELECT 1 FROM ` + c.deadLetters + ` d WHERE d.event_id = ` + c.deadKey + ` AND d.retried_at IS NULL)`
	marked := `0::bigint`
	if c.cfg.MarkProcessed && c.hasProcessedAt {
		marked = `count(*) FILTER (WHERE o.created_at >= @cutoff AND o.processed_at IS NULL AND ` + c.confirmed() + `)`
	}
	err := c.pool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE o.created_at < @cutoff AND `+c.confirmed()+`),
			`+marked+`,
			count(*) FILTER (WHERE o.created_at < @cutoff AND `+dead+`),
			count(*) FILTER (WHERE o.created_at < @cutoff AND NOT `+dead+` AND NOT (`+c.confirmed()+`))
		FROM `+c.table+` o`, c.args(rep.Cutoff)).Scan(&rep.Deleted, &rep.Marked, &rep.DeadLetters, &rep.Unconfirmed)
	if err != nil {
		return fmt.Errorf("count the rows of %s cleanup would delete: %w", c.cfg.Table, err)
	}
	if c.cfg.DropPartitions {
		return c.dropPartitions(ctx, rep)
	}
	return nil
}

// countDeadLetters counts the dead letters kept past the cutoff.
func (c *cleaner) countDeadLetters(ctx context.Context, rep *Report) error {
	err := c.pool.QueryRow(ctx, `SELECT count(*) FROM `+c.table+` o JOIN `+c.deadLetters+` d ON d.event_id = `+c.deadKey+`
		WHERE d.retried_at IS NULL AND o.created_at < $1`, rep.Cutoff).Scan(&rep.DeadLetters)
	if err != nil {
		return fmt.Errorf("count the dead letters kept in %s: %w", c.cfg.Table, err)
	}
	return nil
}
