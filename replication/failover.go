package replication

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SlotOptions are the options of a slot the relay creates.
type SlotOptions struct {
	// Failover makes the slot a failover slot (Postgres 17+): physical
	// standbys with sync_replication_slots = on keep a copy of it, so that
	// the relay goes on from a promoted standby where it left off.
	Failover bool
	// Nudge, when set, is called shortly after the creation starts and
	// then every second until it ends. A slot created on a standby waits
	// for a running-transactions record from the primary, which Postgres
	// writes only every 15 s or so: Nudge asks the primary for one
	// (pg_log_standby_snapshot, Postgres 16+). Its errors are its own to
	// report; the creation goes on waiting regardless.
	Nudge func(context.Context)
}

// failoverMinVersion is the first server_version_num with failover slots.
const failoverMinVersion = 170000

// createReplicationSlot runs CREATE_REPLICATION_SLOT, exporting a
// snapshot. pglogrepl writes the command in the pre-15 syntax, which has
// no FAILOVER option: a failover slot is created with the option list
// syntax (Postgres 15+, and failover needs 17 anyway).
func createReplicationSlot(ctx context.Context, conn *pgconn.PgConn, slot string, opts SlotOptions) (pglogrepl.CreateReplicationSlotResult, error) {
	if !opts.Failover {
		return pglogrepl.CreateReplicationSlot(ctx, conn, slot, "pgoutput",
			pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	}
	if err := CheckName("slot", slot); err != nil {
		return pglogrepl.CreateReplicationSlotResult{}, err
	}
	return pglogrepl.ParseCreateReplicationSlot(conn.Exec(ctx,
		"CREATE_REPLICATION_SLOT "+slot+" LOGICAL pgoutput (SNAPSHOT 'export', FAILOVER true)"))
}

// CheckPrimary refuses a standby: the relay writes its record of the slot
// (and its confirm limit, its dead letters) in the database as it goes, and
// a standby accepts no writes. A relay given --primary-url keeps its record
// there and runs CheckStandbyRead instead.
func CheckPrimary(ctx context.Context, pool *pgxpool.Pool, where string) error {
	var inRecovery bool
	if err := pool.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&inRecovery); err != nil {
		return fmt.Errorf("read whether the server is a standby: %w", err)
	}
	if inRecovery {
		return fatal(fmt.Errorf("the Postgres server at %s is a standby (in recovery): the relay writes its record of the slot into the database as it streams, which a standby refuses", where),
			"point --pg-url at the primary; with several hosts (host=a,b) add target_session_attrs=read-write, which also makes the relay follow a promotion (docs/failover.md); "+
				"or, to read from this standby (Postgres 16+), add --primary-url naming the primary, where the relay then keeps its record (docs/standby.md)")
	}
	return nil
}

// CheckFailover verifies that the server can keep failover slots: Postgres
// 17 or later.
func CheckFailover(ctx context.Context, pool *pgxpool.Pool) error {
	var (
		version int
		text    string
	)
	err := pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, current_setting('server_version')`).Scan(&version, &text)
	if err != nil {
		return fmt.Errorf("read the server version: %w", err)
	}
	if version < failoverMinVersion {
		return fatal(fmt.Errorf("--failover needs Postgres 17 or later, and the server runs %s", text),
			"run without --failover (after a promotion the slot is then missing on the new primary and the relay refuses to go on: `outbox-relay run --recreate-slot` repairs), or upgrade to Postgres 17")
	}
	return nil
}

// SlotFailover reports whether slot is a failover slot (Postgres 17+) and
// whether a process streams from it now.
func SlotFailover(ctx context.Context, pool *pgxpool.Pool, slot string) (failover, active bool, err error) {
	err = pool.QueryRow(ctx, `SELECT failover, active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&failover, &active)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return false, false, fmt.Errorf("read whether replication slot %q is a failover slot: %w", slot, err)
	}
	return failover, active, nil
}

// ErrSlotInUse means the slot is streamed by another process, so its
// options cannot be changed now.
var ErrSlotInUse = errors.New("the replication slot is in use by another process")

// alterWait bounds how long ALTER_REPLICATION_SLOT may wait: it waits for
// a slot in use to be released rather than failing.
const alterWait = 10 * time.Second

// enableFailover turns the slot into a failover slot (ALTER_REPLICATION_SLOT,
// Postgres 17+) on a replication connection that does not stream yet. It
// fails with ErrSlotInUse when another process streams from the slot for
// longer than alterWait: the command waits for a slot in use rather than
// failing, so check that it is not active first.
func enableFailover(ctx context.Context, conn *pgconn.PgConn, slot string) error {
	actx, cancel := context.WithTimeout(ctx, alterWait)
	defer cancel()
	if _, err := conn.Exec(actx, "ALTER_REPLICATION_SLOT "+slot+" (FAILOVER true)").ReadAll(); err != nil {
		var pe *pgconn.PgError
		if (errors.As(err, &pe) && pe.Code == codeObjectInUse) || (actx.Err() != nil && ctx.Err() == nil) {
			return fmt.Errorf("make replication slot %q a failover slot: %w: %v", slot, ErrSlotInUse, err)
		}
		return fmt.Errorf("make replication slot %q a failover slot (ALTER_REPLICATION_SLOT %s (FAILOVER true)): %w", slot, slot, err)
	}
	return nil
}

// StandbySlots returns the server's synchronized_standby_slots: the
// physical slots whose standbys must have received WAL before logical
// walsenders of failover slots send it ("" when none).
func StandbySlots(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var slots string
	if err := pool.QueryRow(ctx, `SELECT coalesce(current_setting('synchronized_standby_slots', true), '')`).Scan(&slots); err != nil {
		return "", fmt.Errorf("read synchronized_standby_slots: %w", err)
	}
	return slots, nil
}

// ensureFailover makes the slot a failover slot, on the session's own
// replication connection before it streams (Config.Failover): the slot is
// then free, unless another instance streams from it, in which case this
// session will not get it either and a later one does the work.
func (s *Stream) ensureFailover(ctx context.Context, conn *pgconn.PgConn) error {
	on, active, err := SlotFailover(ctx, s.pool, s.cfg.Slot)
	if err != nil || on || active {
		return err
	}
	if err := enableFailover(ctx, conn, s.cfg.Slot); err != nil {
		return err
	}
	s.log.Warn().Str("slot", s.cfg.Slot).Msg("--failover: the existing slot was not a failover slot; made it one (ALTER_REPLICATION_SLOT ... (FAILOVER true)): standbys with sync_replication_slots = on copy it from now on")
	return nil
}
