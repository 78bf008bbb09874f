package retention

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/progress"
	"github.com/outbox-relay/outbox-relay/replication"
)

// Defaults of Config.
const (
	// DefaultRetention keeps a week of confirmed rows: room to compare the
	// table with the stream (verify) and to republish from it, and longer
	// than the stream's duplicate window.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultBatch keeps each transaction short: a few milliseconds of
	// row locks and one WAL flush per batch.
	DefaultBatch = 1000
	// DefaultWait is how long a run waits for the slot to pass its own
	// mark: a running relay confirms at every status interval (10 s).
	DefaultWait = 30 * time.Second
	// DefaultLockTimeout bounds how long dropping a partition may wait
	// for (and block) writers of the table.
	DefaultLockTimeout = 2 * time.Second
)

// Config says what a cleanup run may do.
type Config struct {
	Table contract.Table
	Slot  string
	// RecordSchema is the schema of the relay's record, dead letters and
	// cleanup marks: Table's unless set. A relay of several tables keeps
	// them in its first table's schema.
	RecordSchema string
	// QualifiedKeys says the relay reads several tables: its dead letters
	// are keyed by qualified id (schema.table/id), and a row is a dead
	// letter when its qualified id is listed.
	QualifiedKeys bool
	// Retention: rows created less than this long ago are kept.
	Retention time.Duration
	// Batch is the number of rows deleted or marked per transaction.
	Batch int
	// Wait is how long to wait for the slot to pass this run's mark; 0
	// uses only the marks of earlier runs.
	Wait time.Duration
	// DryRun counts what would be deleted, marked and dropped, and changes
	// nothing in the outbox table (the run's mark is still recorded).
	DryRun bool
	// MarkProcessed sets processed_at on the confirmed rows kept.
	MarkProcessed bool
	// ProcessedOnly trusts processed_at alone and reads no slot: for the
	// polling source (run --source poll), which sets processed_at after
	// each PubAck. Rows without it are kept.
	ProcessedOnly bool
	// DropPartitions drops partitions whose range ends before the
	// retention and whose rows are all confirmed.
	DropPartitions bool
	LockTimeout    time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Progress, when set, is shown the rows deleted and marked (a log
	// line every 10s, or a bar), with the rate; the total is not known.
	Progress progress.Reporter
}

// Validate names the first bad field.
func (c *Config) Validate() error {
	switch {
	case c.Slot == "" && !c.ProcessedOnly:
		return errors.New("retention: Slot is empty")
	case c.Table.Name == "":
		return errors.New("retention: Table is empty")
	case c.Retention < 0:
		return fmt.Errorf("retention: Retention %s is negative", c.Retention)
	case c.Batch < 1:
		return fmt.Errorf("retention: Batch %d: must be at least 1", c.Batch)
	case c.Wait < 0:
		return fmt.Errorf("retention: Wait %s is negative", c.Wait)
	case c.DropPartitions && c.LockTimeout <= 0:
		return fmt.Errorf("retention: LockTimeout %s: must be positive to drop partitions", c.LockTimeout)
	}
	return nil
}

// Report is what a run did, or would do in a dry run.
type Report struct {
	DryRun bool
	// Confirmed is the slot's confirmed_flush_lsn.
	Confirmed pglogrepl.LSN
	// Mark is the mark the run relied on; HasMark is false when the slot
	// has passed none yet (then nothing is known confirmed).
	Mark    Mark
	HasMark bool
	Cutoff  time.Time
	// Deleted rows (in a dry run: that would be deleted).
	Deleted int64
	// Marked rows given processed_at (in a dry run: that would be).
	Marked int64
	// DeadLetters older than the cutoff, kept for `dlq retry`.
	DeadLetters int64
	// Unconfirmed rows older than the cutoff, kept (counted in dry runs).
	Unconfirmed int64
	// Dropped partitions (in a dry run: that would be dropped).
	Dropped []string
	// Busy partitions were droppable but their lock was not granted in
	// time; the next run tries again.
	Busy []string
}

// cleaner is one run's state.
type cleaner struct {
	pool *pgxpool.Pool
	cfg  Config
	log  zerolog.Logger
	// Quoted names.
	table, deadLetters, marks string
	// deadKey is the SQL of a row's dead-letter key (see
	// Config.QualifiedKeys).
	deadKey        string
	hasProcessedAt bool
	mark           Mark
}

// Run cleans the outbox table once.
func Run(ctx context.Context, pool *pgxpool.Pool, cfg Config, log zerolog.Logger) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RecordSchema == "" {
		cfg.RecordSchema = cfg.Table.Schema
	}
	c := &cleaner{pool: pool, cfg: cfg, log: log.With().Str("component", "cleanup").Logger(),
		table:       cfg.Table.Quoted(),
		deadLetters: pgx.Identifier{cfg.RecordSchema, checkpoint.DeadLettersTable}.Sanitize(),
		marks:       pgx.Identifier{cfg.RecordSchema, MarksTable}.Sanitize(),
		deadKey:     "o.id::text",
	}
	if cfg.QualifiedKeys {
		c.deadKey = "'" + strings.ReplaceAll(contract.QualifiedID(cfg.Table.String(), ""), "'", "''") + "' || o.id::text"
	}
	rep := Report{DryRun: cfg.DryRun}
	if err := c.checkTable(ctx); err != nil {
		return rep, err
	}
	if cfg.ProcessedOnly {
		if !c.hasProcessedAt {
			return rep, fmt.Errorf("table %s has no processed_at column: without a slot, cleanup cannot tell published rows", cfg.Table)
		}
		c.cfg.MarkProcessed = false
		rep.HasMark = true
	} else if err := c.findMark(ctx, &rep); err != nil || !rep.HasMark {
		return rep, err
	}
	rep.Cutoff = cfg.Now().Add(-cfg.Retention)
	if cfg.DryRun {
		return rep, c.dryRun(ctx, &rep)
	}
	return rep, c.apply(ctx, &rep)
}

// apply drops, deletes and marks what is confirmed.
func (c *cleaner) apply(ctx context.Context, rep *Report) error {
	// Whole partitions first: cheaper than deleting their rows.
	if c.cfg.DropPartitions {
		if err := c.dropPartitions(ctx, rep); err != nil {
			return err
		}
	}
	var err error
	if rep.Deleted, err = c.batches(ctx, "deleting: confirmed rows older than the retention", c.deleteSQL(), rep.Cutoff); err != nil {
		return fmt.Errorf("delete confirmed rows of %s: %w", c.cfg.Table, err)
	}
	if c.cfg.MarkProcessed && c.hasProcessedAt {
		if rep.Marked, err = c.batches(ctx, "marking processed: confirmed rows kept", c.markSQL(), rep.Cutoff); err != nil {
			return fmt.Errorf("mark processed_at on confirmed rows of %s: %w", c.cfg.Table, err)
		}
	}
	if err := c.countDeadLetters(ctx, rep); err != nil {
		return err
	}
	if c.cfg.ProcessedOnly {
		return nil
	}
	return pruneMarks(ctx, c.pool, c.marks, c.cfg.Slot, c.mark)
}

// findMark records this run's mark, waits for the slot to pass it, and
// sets the newest mark the slot has passed (rep.HasMark false: none).
func (c *cleaner) findMark(ctx context.Context, rep *Report) error {
	if err := c.checkSlot(ctx); err != nil {
		return err
	}
	fresh, err := takeMark(ctx, c.pool, c.marks, c.cfg.Slot)
	if err != nil {
		return err
	}
	if rep.Confirmed, err = c.waitConfirmed(ctx, fresh.WALLSN); err != nil {
		return err
	}
	// The slot's record is read again after its position: a slot taken
	// up anew meanwhile must have finished its take-up too.
	if err := c.checkSlot(ctx); err != nil {
		return err
	}
	c.mark, rep.HasMark, err = passedMark(ctx, c.pool, c.marks, c.cfg.Slot, rep.Confirmed)
	if err == nil && !rep.HasMark {
		c.log.Info().Stringer("confirmed_lsn", rep.Confirmed).Stringer("mark_lsn", fresh.WALLSN).
			Msg("the slot has not passed a cleanup mark yet: nothing is known confirmed; run again once the relay has confirmed")
	}
	rep.Mark = c.mark
	return err
}

// checkTable requires created_at and notes whether processed_at exists.
func (c *cleaner) checkTable(ctx context.Context) error {
	cols, err := replication.Columns(ctx, c.pool, c.cfg.Table)
	if err != nil {
		return err
	}
	if len(cols) == 0 {
		return fmt.Errorf("table %s does not exist", c.cfg.Table)
	}
	if _, ok := cols[contract.ColumnCreatedAt]; !ok {
		return fmt.Errorf("table %s has no created_at column: cleanup keeps rows by their age and cannot tell it", c.cfg.Table)
	}
	_, c.hasProcessedAt = cols["processed_at"]
	return nil
}

// checkSlot refuses a slot whose confirmed position does not say what the
// relay has stored: missing, not yet taken up, or moved by someone else.
func (c *cleaner) checkSlot(ctx context.Context) error {
	info, err := replication.LookupSlot(ctx, c.pool, c.cfg.Slot)
	if err != nil {
		return err
	}
	var db string
	if err := c.pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		return fmt.Errorf("read the database name: %w", err)
	}
	if !info.Exists || info.Database != db {
		if err := c.onStandby(ctx); err != nil {
			return err
		}
		return fmt.Errorf("replication slot %q does not exist in database %s: cleanup deletes only what the relay's slot has confirmed; start the relay first, or name its slot with --slot", c.cfg.Slot, db)
	}
	rec, err := checkpoint.NewStore(c.pool, c.cfg.RecordSchema, c.cfg.Slot).Load(ctx)
	if err != nil {
		return err
	}
	switch {
	case !rec.Exists || rec.CreatedLSN == 0:
		return fmt.Errorf("slot %q is not one the relay created (no record in %s): cleanup trusts only the relay's own slot", c.cfg.Slot, checkpoint.RecordsTable)
	case !rec.Bootstrapped:
		return fmt.Errorf("slot %q has not finished its take-up (the rows present at its creation are not all published yet): run cleanup once the relay has started", c.cfg.Slot)
	case info.ConfirmedFlush > rec.Limit+checkpoint.Slack:
		// The relay's own start-up check (see checkpoint.Ledger).
		return fmt.Errorf("slot %q confirmed %s, beyond what the relay may have confirmed (%s): it was moved by someone else, so its position says nothing about the stream; run `outbox-relay verify` and repair before cleaning up",
			c.cfg.Slot, info.ConfirmedFlush, rec.Limit+checkpoint.Slack)
	}
	return nil
}

// waitConfirmed returns the slot's confirmed position once it reaches
// target, or when Wait has passed.
func (c *cleaner) waitConfirmed(ctx context.Context, target pglogrepl.LSN) (pglogrepl.LSN, error) {
	deadline := time.Now().Add(c.cfg.Wait)
	for {
		info, err := replication.LookupSlot(ctx, c.pool, c.cfg.Slot)
		if err != nil {
			return 0, err
		}
		if info.ConfirmedFlush >= target || !time.Now().Before(deadline) {
			return info.ConfirmedFlush, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// onStandby refuses, saying why, a slot that is not on this server but
// that the relay's record here names: a relay reading from a standby
// (run --primary-url) keeps its record on the primary and its slot on the
// standby, and cleanup, which deletes on the primary only what the slot
// confirmed, does not support a slot on another server.
func (c *cleaner) onStandby(ctx context.Context) error {
	rec, err := checkpoint.NewStore(c.pool, c.cfg.RecordSchema, c.cfg.Slot).Load(ctx)
	if err != nil {
		return err
	}
	if !rec.Exists || rec.CreatedLSN == 0 {
		return nil
	}
	return fmt.Errorf("replication slot %q is not on this server, but the relay's record of it is here: if the relay reads from a standby (run --primary-url), cleanup does not support a slot on a standby (delete published rows yourself once `outbox-relay verify` finds them in the stream, or run the relay from the primary); if not, the slot was dropped: start the relay, which says what it needs", c.cfg.Slot)
}
