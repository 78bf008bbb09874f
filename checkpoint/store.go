package checkpoint

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// RecordsTable is the table, in the outbox table's schema, where the relay
// keeps one row per slot (created by `outbox-relay migrate`).
const RecordsTable = "outbox_relay_slots"

// Record is the relay's own record of its slot. Postgres' slot alone cannot
// tell whether it is the slot the relay created or one made since under
// the same name; the record can.
type Record struct {
	Exists bool
	// CreatedLSN is the slot's consistent point when the relay created it.
	CreatedLSN pglogrepl.LSN
	// Limit is a position the relay has never confirmed past. A slot whose
	// confirmed_flush_lsn is beyond it was moved by someone else.
	Limit pglogrepl.LSN
	// Bootstrapped is true once the rows present at the slot's creation
	// have been published.
	Bootstrapped bool
}

// Store reads and writes the relay's record of one slot.
type Store struct {
	pool        *pgxpool.Pool
	table       string
	deadLetters string
	slot        string
}

// DeadLettersTable is the table, in the outbox table's schema, that lists
// the events the relay sent to the dead-letter subject.
const DeadLettersTable = "outbox_relay_dead_letters"

// NewStore returns the Store for slot, with its tables in schema.
func NewStore(pool *pgxpool.Pool, schema, slot string) *Store {
	return &Store{pool: pool, slot: slot,
		table:       pgx.Identifier{schema, RecordsTable}.Sanitize(),
		deadLetters: pgx.Identifier{schema, DeadLettersTable}.Sanitize()}
}

// RecordDeadLetter lists an event the relay sent to the dead-letter
// subject, with the reason; the dead-letter view shows its row.
func (s *Store) RecordDeadLetter(ctx context.Context, eventID, reason string, commitLSN pglogrepl.LSN) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO `+s.deadLetters+` (event_id, reason, commit_lsn) VALUES ($1, $2, $3::pg_lsn)
		ON CONFLICT (event_id) DO UPDATE SET reason = EXCLUDED.reason, commit_lsn = EXCLUDED.commit_lsn,
			dead_lettered_at = now(), retried_at = NULL`, eventID, reason, commitLSN)
	if err != nil {
		return fmt.Errorf("record dead letter %s: %w", eventID, err)
	}
	return nil
}

// Load reads the record; Record.Exists is false when there is none.
func (s *Store) Load(ctx context.Context) (Record, error) {
	var r Record
	err := s.pool.QueryRow(ctx, `SELECT created_lsn, confirm_limit, bootstrapped_at IS NOT NULL FROM `+s.table+` WHERE slot_name = $1`, s.slot).
		Scan(&r.CreatedLSN, &r.Limit, &r.Bootstrapped)
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, nil
	}
	if err != nil {
		return Record{}, fmt.Errorf("read the relay's record of slot %q from %s (run `outbox-relay migrate` if it is missing): %w", s.slot, s.table, err)
	}
	r.Exists = true
	return r, nil
}

// Create writes a fresh record for a slot created at lsn, replacing any.
func (s *Store) Create(ctx context.Context, lsn pglogrepl.LSN, bootstrapped bool) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO `+s.table+` (slot_name, created_lsn, confirm_limit, bootstrapped_at)
		VALUES ($1, $2::pg_lsn, $2::pg_lsn, CASE WHEN $3 THEN now() END)
		ON CONFLICT (slot_name) DO UPDATE SET created_lsn = EXCLUDED.created_lsn, confirm_limit = EXCLUDED.confirm_limit,
			bootstrapped_at = EXCLUDED.bootstrapped_at, updated_at = now()`, s.slot, lsn, bootstrapped)
	if err != nil {
		return fmt.Errorf("record slot %q in %s: %w", s.slot, s.table, err)
	}
	return nil
}

// MarkBootstrapped records that the initial rows are published.
func (s *Store) MarkBootstrapped(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `UPDATE `+s.table+` SET bootstrapped_at = now(), updated_at = now() WHERE slot_name = $1`, s.slot)
	if err != nil {
		return fmt.Errorf("record the end of slot %q's initial publish: %w", s.slot, err)
	}
	return nil
}

// RaiseLimit records that the relay may confirm up to lsn.
func (s *Store) RaiseLimit(ctx context.Context, lsn pglogrepl.LSN) error {
	_, err := s.pool.Exec(ctx, `UPDATE `+s.table+` SET confirm_limit = $2::pg_lsn, updated_at = now()
		WHERE slot_name = $1 AND confirm_limit < $2::pg_lsn`, s.slot, lsn)
	if err != nil {
		return fmt.Errorf("record confirm limit %s for slot %q: %w", lsn, s.slot, err)
	}
	return nil
}

// Delete removes the record.
func (s *Store) Delete(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM `+s.table+` WHERE slot_name = $1`, s.slot); err != nil {
		return fmt.Errorf("delete the record of slot %q: %w", s.slot, err)
	}
	return nil
}
