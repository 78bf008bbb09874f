package retention

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// partition is a leaf partition whose range ends at or before the cutoff.
type partition struct {
	name string // qualified and quoted, as regclass prints it
	end  time.Time
}

// oldPartitions lists the table's partitions whose range on created_at
// ends at or before cutoff; the default partition and partitions without
// an upper bound never qualify.
func (c *cleaner) oldPartitions(ctx context.Context, cutoff time.Time) ([]partition, error) {
	var key *string
	if err := c.pool.QueryRow(ctx, `SELECT pg_get_partkeydef(to_regclass($1))`, c.table).Scan(&key); err != nil {
		return nil, fmt.Errorf("read the partition key of %s: %w", c.cfg.Table, err)
	}
	if key == nil {
		return nil, fmt.Errorf("table %s is not partitioned: drop --drop-partitions", c.cfg.Table)
	}
	if !strings.EqualFold(*key, "RANGE (created_at)") {
		return nil, fmt.Errorf("table %s is partitioned by %s: --drop-partitions handles only RANGE (created_at)", c.cfg.Table, *key)
	}
	rows, err := c.pool.Query(ctx, `SELECT p.oid::regclass::text, b.upper
		FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhrelid,
		LATERAL (SELECT substring(pg_get_expr(p.relpartbound, p.oid) FROM 'TO \(''([^'']*)''\)')::timestamptz AS upper) b
		WHERE i.inhparent = to_regclass($1) AND p.relkind = 'r' AND b.upper <= $2
		ORDER BY b.upper`, c.table, cutoff)
	if err != nil {
		return nil, fmt.Errorf("list the partitions of %s: %w", c.cfg.Table, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (partition, error) {
		var p partition
		return p, r.Scan(&p.name, &p.end)
	})
}

// dropPartitions drops every old partition whose rows are all confirmed.
func (c *cleaner) dropPartitions(ctx context.Context, rep *Report) error {
	parts, err := c.oldPartitions(ctx, rep.Cutoff)
	if err != nil {
		return err
	}
	for _, p := range parts {
		dropped, err := c.dropPartition(ctx, p)
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == "55P03": // lock_not_available
			c.log.Warn().Str("partition", p.name).Dur("lock_timeout", c.cfg.LockTimeout).
				Msg("partition busy: its writers held it past the lock timeout; the next run tries again")
			rep.Busy = append(rep.Busy, p.name)
		case errors.As(err, &pgErr) && pgErr.Code == "42P01": // undefined_table
			// Dropped meanwhile (another cleanup run, an operator).
			continue
		case err != nil:
			return fmt.Errorf("drop partition %s: %w", p.name, err)
		case dropped:
			rep.Dropped = append(rep.Dropped, p.name)
		}
	}
	return nil
}

// dropPartition drops p if every row in it is confirmed. The table and
// the partition are locked first, so no transaction that could still
// commit a row into p is running when its rows are checked: a writer
// holding p waits the lock out (bounded by LockTimeout), and one that
// commits before the lock is granted is seen by the check (its rows are
// newer than the mark's horizon, so p is kept). A dry run checks without
// locking and drops nothing.
func (c *cleaner) dropPartition(ctx context.Context, p partition) (bool, error) {
	check := `SELECT count(*) FROM ` + p.name + ` o WHERE NOT (` + c.confirmed() + `)`
	var kept int64
	if c.cfg.DryRun {
		if err := c.pool.QueryRow(ctx, check, c.args(time.Time{})).Scan(&kept); err != nil {
			return false, err
		}
		return kept == 0, nil
	}
	var dropped bool
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = %d`, c.cfg.LockTimeout.Milliseconds())); err != nil {
			return err
		}
		// The parent first, as writers lock it: no deadlock with them.
		if _, err := tx.Exec(ctx, `LOCK TABLE ONLY `+c.table+` IN ACCESS EXCLUSIVE MODE`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE `+p.name+` IN ACCESS EXCLUSIVE MODE`); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, check, c.args(time.Time{})).Scan(&kept); err != nil {
			return err
		}
		if kept > 0 {
			c.log.Info().Str("partition", p.name).Int64("unconfirmed_rows", kept).Msg("partition kept: rows not confirmed yet, or dead letters")
			return nil
		}
		if _, err := tx.Exec(ctx, `DROP TABLE `+p.name); err != nil {
			return err
		}
		dropped = true
		return nil
	})
	if err == nil && dropped {
		c.log.Info().Str("partition", p.name).Time("range_end", p.end).Msg("partition dropped")
	}
	return dropped, err
}
