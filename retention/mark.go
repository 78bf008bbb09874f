package retention

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// MarksTable is the table, in the outbox table's schema, that holds the
// marks (created by `outbox-relay migrate`).
const MarksTable = "outbox_relay_cleanup_marks"

// Mark is an instant cleanup observed: every transaction with an id below
// Horizon had finished by then, so each that committed did so before
// WALLSN. Once the slot has confirmed WALLSN, their rows are stored.
type Mark struct {
	WALLSN  pglogrepl.LSN
	Horizon uint64 // a full (epoch-extended) transaction id
}

// horizon32 is the horizon as a 32-bit transaction id, the form of a
// row's xmin.
func (m Mark) horizon32() int64 { return int64(m.Horizon & 0xFFFFFFFF) }

// takeMark records a mark for slot and returns it. The statement's
// snapshot is taken before it runs, so the insert position it reads is at
// or after the commit record of every transaction older than the
// snapshot's xmin.
func takeMark(ctx context.Context, pool *pgxpool.Pool, marks, slot string) (Mark, error) {
	var m Mark
	var h string
	err := pool.QueryRow(ctx, `INSERT INTO `+marks+` (slot_name, xid_horizon, wal_lsn)
		SELECT $1, pg_snapshot_xmin(pg_current_snapshot()), pg_current_wal_insert_lsn()
		ON CONFLICT (slot_name, wal_lsn) DO UPDATE SET wal_lsn = EXCLUDED.wal_lsn
		RETURNING wal_lsn, xid_horizon::text`, slot).Scan(&m.WALLSN, &h)
	if err != nil {
		return Mark{}, fmt.Errorf("record a cleanup mark in %s (run `outbox-relay migrate` if it is missing): %w", marks, err)
	}
	if m.Horizon, err = strconv.ParseUint(h, 10, 64); err != nil {
		return Mark{}, fmt.Errorf("read the mark's horizon %q: %w", h, err)
	}
	return m, nil
}

// passedMark returns the newest mark of slot at or before confirmed, and
// false when the slot has passed none yet.
func passedMark(ctx context.Context, pool *pgxpool.Pool, marks, slot string, confirmed pglogrepl.LSN) (Mark, bool, error) {
	var m Mark
	var h string
	err := pool.QueryRow(ctx, `SELECT wal_lsn, xid_horizon::text FROM `+marks+`
		WHERE slot_name = $1 AND wal_lsn <= $2::pg_lsn ORDER BY wal_lsn DESC LIMIT 1`, slot, confirmed).Scan(&m.WALLSN, &h)
	if errors.Is(err, pgx.ErrNoRows) {
		return Mark{}, false, nil
	}
	if err != nil {
		return Mark{}, false, fmt.Errorf("read the cleanup marks of slot %q: %w", slot, err)
	}
	if m.Horizon, err = strconv.ParseUint(h, 10, 64); err != nil {
		return Mark{}, false, fmt.Errorf("read the mark's horizon %q: %w", h, err)
	}
	return m, true, nil
}

// pruneMarks deletes the marks of slot older than used: a newer passed
// mark covers everything they cover.
func pruneMarks(ctx context.Context, pool *pgxpool.Pool, marks, slot string, used Mark) error {
	_, err := pool.Exec(ctx, `DELETE FROM `+marks+` WHERE slot_name = $1 AND wal_lsn < $2::pg_lsn`, slot, used.WALLSN)
	if err != nil {
		return fmt.Errorf("prune the cleanup marks of slot %q: %w", slot, err)
	}
	return nil
}
