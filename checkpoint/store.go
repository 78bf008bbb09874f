package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/contract"
)

// RecordsTable is the table, in the outbox table's schema, where the relay
// keeps one row per slot (created by `outbox-relay migrate`).
const RecordsTable = "outbox_relay_slots"

// Record is the relay's own record of its slot. Postgres' slot alone cannot
// tell whether it is the slot the relay created or one made since under
// the same name; the record can. It is written before the slot is created,
// so that a take-up interrupted at any instant is redone the same way.
type Record struct {
	Exists bool
	// CreatedLSN is the slot's consistent point when the relay created it;
	// zero while the slot's creation is not recorded yet.
	CreatedLSN pglogrepl.LSN
	// Limit is a position the relay has never confirmed past. A slot whose
	// confirmed_flush_lsn is beyond it was moved by someone else.
	Limit pglogrepl.LSN
	// Bootstrapped is true once what the slot's snapshot had to give (the
	// rows present at its creation, or a repair) has been published.
	Bootstrapped bool
	// Kind is what the take-up publishes from the slot's snapshot.
	Kind Kind
	// RepairSince bounds a repair to rows created at or after it (zero: all).
	RepairSince time.Time
	// Publication is the identity of the publication the slot decodes
	// through, as of the slot's creation ("" when not recorded yet).
	Publication string
	// Stopped is where the relay stopped, exactly, when it last stopped
	// cleanly (its final position confirmed, recorded while its session
	// still held the slot); zero after a stop that was not clean, and
	// while a session streams.
	Stopped pglogrepl.LSN
}

// Allowed returns the newest position the relay may have confirmed: where
// it stopped, when it last stopped cleanly; else its limit plus Slack. A
// slot beyond it was moved by someone else.
func (r Record) Allowed() pglogrepl.LSN {
	if r.Stopped != 0 {
		return r.Stopped
	}
	return r.Limit + Slack
}

// Kind is what a take-up publishes from its new slot's snapshot.
type Kind string

const (
	// KindInitial publishes the rows present at the slot's creation that
	// are not processed yet (for example left by a polling relay).
	KindInitial Kind = "initial"
	// KindRepair publishes every committed row the stream lacks.
	KindRepair Kind = "repair"
)

// ErrRecordChanged means the record is no longer the one this relay wrote:
// another instance took up the slot meanwhile.
var ErrRecordChanged = errors.New("the relay's record of its slot was changed by another instance")

// DB is what a Store needs of a connection: a pool, or the single
// connection that holds the take-up lock.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store reads and writes the relay's record of one slot.
type Store struct {
	db          DB
	table       string
	deadLetters string
	slot        string
	// outboxTable is the outbox table the slot serves (schema.table),
	// written with the record; "" leaves it unknown (see WithTable).
	outboxTable string
}

// WithTable returns the same store, writing with the record that the slot
// serves table: OtherSlots tells the slots of a table from those of
// others by it.
func (s *Store) WithTable(table contract.Table) *Store {
	c := *s
	c.outboxTable = table.String()
	return &c
}

// nullable is v, or NULL when v is empty.
func nullable(v string) *string {
	if v == "" {
		return nil
	}
	return &v
}

// DeadLettersTable is the table, in the outbox table's schema, that lists
// the events the relay sent to the dead-letter subject.
const DeadLettersTable = "outbox_relay_dead_letters"

// NewStore returns the Store for slot, with its tables in schema.
func NewStore(db DB, schema, slot string) *Store {
	return &Store{db: db, slot: slot,
		table:       pgx.Identifier{schema, RecordsTable}.Sanitize(),
		deadLetters: pgx.Identifier{schema, DeadLettersTable}.Sanitize()}
}

// On returns the same store over db.
func (s *Store) On(db DB) *Store {
	c := *s
	c.db = db
	return &c
}

// RecordDeadLetter lists an event the relay sent to the dead-letter
// subject, with the reason; the dead-letter view shows its row. The same
// event dead-lettered again from the same commit (a replay after a
// restart) keeps its record as it was, retried_at included; a new failure
// (a retry refused again, commit LSN 0) lists it anew.
func (s *Store) RecordDeadLetter(ctx context.Context, eventID, reason string, commitLSN pglogrepl.LSN) error {
	_, err := s.db.Exec(ctx, `INSERT INTO `+s.deadLetters+` AS d (event_id, reason, commit_lsn) VALUES ($1, $2, $3::pg_lsn)
		ON CONFLICT (event_id) DO UPDATE SET reason = EXCLUDED.reason, commit_lsn = EXCLUDED.commit_lsn,
			dead_lettered_at = CASE WHEN d.commit_lsn = EXCLUDED.commit_lsn THEN d.dead_lettered_at ELSE now() END,
			retried_at = CASE WHEN d.commit_lsn = EXCLUDED.commit_lsn THEN d.retried_at END`, eventID, reason, commitLSN)
	if err != nil {
		return fmt.Errorf("record dead letter %s: %w", eventID, err)
	}
	return nil
}

// DeadLettersNotRetried counts the dead letters listed and not retried
// (`outbox-relay dlq retry` marks them retried), for every relay that
// records them in this schema.
func (s *Store) DeadLettersNotRetried(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM `+s.deadLetters+` WHERE retried_at IS NULL`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the dead letters in %s: %w", s.deadLetters, err)
	}
	return n, nil
}

// Load reads the record; Record.Exists is false when there is none.
func (s *Store) Load(ctx context.Context) (Record, error) {
	var r Record
	var since *time.Time
	var pub *string
	err := s.db.QueryRow(ctx, `SELECT created_lsn, confirm_limit, bootstrapped_at IS NOT NULL, bootstrap_kind, repair_since, publication,
			coalesce(stopped_lsn, '0/0')
		FROM `+s.table+` WHERE slot_name = $1`, s.slot).
		Scan(&r.CreatedLSN, &r.Limit, &r.Bootstrapped, &r.Kind, &since, &pub, &r.Stopped)
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, nil
	}
	if denied(err) {
		return Record{}, deniedError(fmt.Errorf("read the relay's record of slot %q from %s: %w", s.slot, s.table, err))
	}
	if err != nil {
		return Record{}, fmt.Errorf("read the relay's record of slot %q from %s (run `outbox-relay migrate` if it is missing or older than the relay): %w", s.slot, s.table, err)
	}
	r.Exists = true
	if since != nil {
		r.RepairSince = *since
	}
	if pub != nil {
		r.Publication = *pub
	}
	return r, nil
}

// Begin records, before a slot is created, that a take-up of this kind
// starts: a record that says so survives a crash at any later instant.
// It replaces any record of the slot.
func (s *Store) Begin(ctx context.Context, kind Kind, repairSince time.Time) error {
	var since *time.Time
	if !repairSince.IsZero() {
		since = &repairSince
	}
	_, err := s.db.Exec(ctx, `INSERT INTO `+s.table+` (slot_name, created_lsn, confirm_limit, bootstrapped_at, bootstrap_kind, repair_since, publication, outbox_table)
		VALUES ($1, '0/0', '0/0', NULL, $2, $3, NULL, $4)
		ON CONFLICT (slot_name) DO UPDATE SET created_lsn = '0/0', confirm_limit = '0/0', bootstrapped_at = NULL,
			bootstrap_kind = EXCLUDED.bootstrap_kind, repair_since = EXCLUDED.repair_since, publication = NULL, stopped_lsn = NULL,
			outbox_table = EXCLUDED.outbox_table, updated_at = now()`,
		s.slot, string(kind), since, nullable(s.outboxTable))
	if err != nil {
		return fmt.Errorf("record the start of slot %q's take-up in %s: %w", s.slot, s.table, err)
	}
	return nil
}

// Created records the new slot's consistent point and the identity of its
// publication, for the take-up Begin started.
func (s *Store) Created(ctx context.Context, point pglogrepl.LSN, publication string) error {
	tag, err := s.db.Exec(ctx, `UPDATE `+s.table+` SET created_lsn = $2, confirm_limit = $2, publication = $3, updated_at = now()
		WHERE slot_name = $1 AND bootstrapped_at IS NULL AND created_lsn = '0/0'`, s.slot, point, publication)
	if err != nil {
		return fmt.Errorf("record slot %q's creation at %s: %w", s.slot, point, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("record slot %q's creation at %s: %w", s.slot, point, ErrRecordChanged)
	}
	return nil
}

// Adopt records a slot the relay did not create, at lsn, as taken up.
func (s *Store) Adopt(ctx context.Context, lsn pglogrepl.LSN, publication string) error {
	_, err := s.db.Exec(ctx, `INSERT INTO `+s.table+` (slot_name, created_lsn, confirm_limit, bootstrapped_at, bootstrap_kind, publication, outbox_table)
		VALUES ($1, $2, $2, now(), 'initial', $3, $4)
		ON CONFLICT (slot_name) DO UPDATE SET created_lsn = EXCLUDED.created_lsn, confirm_limit = EXCLUDED.confirm_limit,
			bootstrapped_at = EXCLUDED.bootstrapped_at, bootstrap_kind = 'initial', repair_since = NULL,
			publication = EXCLUDED.publication, stopped_lsn = NULL, outbox_table = EXCLUDED.outbox_table, updated_at = now()`, s.slot, lsn, publication, nullable(s.outboxTable))
	if err != nil {
		return fmt.Errorf("record slot %q in %s: %w", s.slot, s.table, err)
	}
	return nil
}

// MarkBootstrapped records that the take-up of the slot created at created
// is complete. It fails with ErrRecordChanged when the record is no
// longer that slot's: another instance started over meanwhile.
func (s *Store) MarkBootstrapped(ctx context.Context, created pglogrepl.LSN) error {
	tag, err := s.db.Exec(ctx, `UPDATE `+s.table+` SET bootstrapped_at = now(), updated_at = now()
		WHERE slot_name = $1 AND created_lsn = $2 AND bootstrapped_at IS NULL`, s.slot, created)
	if err != nil {
		return fmt.Errorf("record the end of slot %q's take-up: %w", s.slot, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("record the end of slot %q's take-up: %w", s.slot, ErrRecordChanged)
	}
	return nil
}

// SetPublication records the publication's identity where a record made
// by an older relay lacks it.
func (s *Store) SetPublication(ctx context.Context, created pglogrepl.LSN, publication string) error {
	tag, err := s.db.Exec(ctx, `UPDATE `+s.table+` SET publication = $3, updated_at = now()
		WHERE slot_name = $1 AND created_lsn = $2 AND publication IS NULL`, s.slot, created, publication)
	if err != nil {
		return fmt.Errorf("record the publication of slot %q: %w", s.slot, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("record the publication of slot %q: %w", s.slot, ErrRecordChanged)
	}
	return nil
}

// SetTable records the outbox table the slot serves where the record
// lacks it (made by an older relay) or names another.
func (s *Store) SetTable(ctx context.Context) error {
	if s.outboxTable == "" {
		return nil
	}
	_, err := s.db.Exec(ctx, `UPDATE `+s.table+` SET outbox_table = $2, updated_at = now()
		WHERE slot_name = $1 AND outbox_table IS DISTINCT FROM $2`, s.slot, s.outboxTable)
	if err != nil {
		return fmt.Errorf("record the table of slot %q: %w", s.slot, err)
	}
	return nil
}

// RaiseLimit records that the relay may confirm up to lsn.
func (s *Store) RaiseLimit(ctx context.Context, lsn pglogrepl.LSN) error {
	_, err := s.db.Exec(ctx, `UPDATE `+s.table+` SET confirm_limit = $2::pg_lsn, updated_at = now()
		WHERE slot_name = $1 AND confirm_limit < $2::pg_lsn`, s.slot, lsn)
	if err != nil {
		return fmt.Errorf("record confirm limit %s for slot %q: %w", lsn, s.slot, err)
	}
	return nil
}

// RecordStop records that the relay stopped cleanly at lsn, the final
// position Postgres confirmed, while its session still held the slot
// created at created: until a session streams again, the slot cannot be
// beyond lsn but by someone else's hand (see Record.Stopped). One write,
// which nothing confirms: no feedback through keepalives.
func (s *Store) RecordStop(ctx context.Context, created, lsn pglogrepl.LSN) error {
	_, err := s.db.Exec(ctx, `UPDATE `+s.table+` SET stopped_lsn = $3::pg_lsn, updated_at = now()
		WHERE slot_name = $1 AND created_lsn = $2`, s.slot, created, lsn)
	if err != nil {
		return fmt.Errorf("record where the relay stopped (%s) for slot %q: %w", lsn, s.slot, err)
	}
	return nil
}

// ClearStop records that a session streams from the slot created at
// created: its position moves from now on. It writes only when a stop is
// recorded.
func (s *Store) ClearStop(ctx context.Context, created pglogrepl.LSN) error {
	_, err := s.db.Exec(ctx, `UPDATE `+s.table+` SET stopped_lsn = NULL, updated_at = now()
		WHERE slot_name = $1 AND created_lsn = $2 AND stopped_lsn IS NOT NULL`, s.slot, created)
	if err != nil {
		return fmt.Errorf("record that slot %q streams again: %w", s.slot, err)
	}
	return nil
}

// denied reports whether err is Postgres refusing the relay's role a
// privilege (SQLSTATE 42501): retrying cannot fix it.
func denied(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501"
}

// deniedError makes err, a privilege the relay's role lacks, end the
// relay with the fix.
func deniedError(err error) error {
	return &contract.FatalError{Err: err,
		Hint: "grant the relay's role what it needs: `outbox-relay migrate --relay-role ROLE` creates such a role, or run `outbox-relay doctor` for the GRANT statements it lacks"}
}
