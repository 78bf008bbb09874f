package replication

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Replication slot names may only hold lower-case letters, digits and
// underscores (Postgres' own rule). Publication names are held to the same
// rule, so both can be written into replication commands without quoting
// surprises.
var nameRE = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// CheckName validates a slot or publication name.
func CheckName(kind, name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%s name %q: use 1 to 63 lower-case letters, digits and underscores", kind, name)
	}
	return nil
}

// SlotInfo is a replication slot as pg_replication_slots shows it.
type SlotInfo struct {
	Exists         bool
	Plugin         string
	Database       string
	Temporary      bool
	Active         bool
	ActivePID      int32
	ConfirmedFlush pglogrepl.LSN
	RestartLSN     pglogrepl.LSN
	WALStatus      string // reserved, extended, unreserved or lost
	// LagBytes is the server's WAL position (WALPositionSQL) -
	// confirmed_flush_lsn.
	LagBytes int64
	// RetainedBytes is the server's WAL position - restart_lsn: the WAL
	// the server keeps for the slot.
	RetainedBytes int64
	// SafeWALSize is how many more bytes of WAL can be written before the
	// slot is in danger of being invalidated (pg_replication_slots.
	// safe_wal_size); nil when max_slot_wal_keep_size is -1 (no limit).
	SafeWALSize *int64
}

// WALPositionSQL is the server's WAL position, as far as its slots can be
// concerned: the insert position on a primary (pg_current_wal_lsn), the
// replay position on a standby (pg_last_wal_replay_lsn; the former is
// refused during recovery). A standby replays the primary's WAL, so the
// positions of both compare as one.
const WALPositionSQL = `(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)`

// WALPosition reads WALPositionSQL.
func WALPosition(ctx context.Context, db Querier) (pglogrepl.LSN, error) {
	var at *pglogrepl.LSN
	if err := db.QueryRow(ctx, `SELECT `+WALPositionSQL).Scan(&at); err != nil {
		return 0, fmt.Errorf("read the WAL position: %w", err)
	}
	if at == nil {
		return 0, errors.New("read the WAL position: the standby has replayed no WAL yet")
	}
	return *at, nil
}

// Identify reads, on an ordinary connection, what a relay's messages name
// as their source: the Postgres system identifier (pg_control_system(),
// which a role may be refused) and the database. Tools that compare the
// table with the stream (verify, status) read it to tell the table's
// messages from other relays'.
func Identify(ctx context.Context, db Querier) (system, database string, err error) {
	err = db.QueryRow(ctx, `SELECT (SELECT system_identifier::text FROM pg_control_system()), current_database()`).Scan(&system, &database)
	if err != nil {
		return "", "", fmt.Errorf("read the Postgres system identifier (pg_control_system()): %w", err)
	}
	return system, database, nil
}

// LookupSlot reads the slot's row in pg_replication_slots.
func LookupSlot(ctx context.Context, pool *pgxpool.Pool, slot string) (SlotInfo, error) {
	var (
		info               SlotInfo
		plugin, db, status *string
		pid                *int32
		confirmed, restart *pglogrepl.LSN // NULL for a physical or an invalidated slot
		lag, retained      *int64
	)
	err := pool.QueryRow(ctx, `SELECT plugin, database, temporary, active, active_pid,
			confirmed_flush_lsn, restart_lsn, wal_status,
			(`+WALPositionSQL+` - confirmed_flush_lsn)::bigint,
			(`+WALPositionSQL+` - restart_lsn)::bigint, safe_wal_size
		FROM pg_replication_slots WHERE slot_name = $1`, slot).
		Scan(&plugin, &db, &info.Temporary, &info.Active, &pid, &confirmed, &restart, &status, &lag, &retained, &info.SafeWALSize)
	if errors.Is(err, pgx.ErrNoRows) {
		return SlotInfo{}, nil
	}
	if err != nil {
		return SlotInfo{}, fmt.Errorf("look up replication slot %q: %w", slot, err)
	}
	info.Exists = true
	info.Plugin, info.Database, info.WALStatus = deref(plugin), deref(db), deref(status)
	info.ActivePID = deref(pid)
	info.ConfirmedFlush, info.RestartLSN = deref(confirmed), deref(restart)
	info.LagBytes, info.RetainedBytes = deref(lag), deref(retained)
	return info, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// CheckSlot verifies that an existing slot is one the relay can stream from.
func CheckSlot(info SlotInfo, slot, database string) error {
	switch {
	case info.Plugin == "":
		return fatal(fmt.Errorf("replication slot %q uses output plugin \"\": it is a physical slot (a standby's)", slot),
			"the relay needs a logical pgoutput slot of its own: use another slot name")
	case info.Plugin != "pgoutput":
		return fatal(fmt.Errorf("replication slot %q uses output plugin %q", slot, info.Plugin),
			"the relay needs a pgoutput slot: use another slot name, or drop this one if nothing else uses it (SELECT pg_drop_replication_slot('%s'))", slot)
	case info.Temporary:
		return fatal(fmt.Errorf("replication slot %q is temporary", slot), "use a permanent slot")
	case info.Database != database:
		return fatal(fmt.Errorf("replication slot %q belongs to database %q, not %q", slot, info.Database, database),
			"connect to the slot's database or choose another slot name")
	case info.WALStatus == "lost":
		return gap(fmt.Errorf("replication slot %q was invalidated (wal_status lost): Postgres removed WAL it still needed", slot),
			"events committed after its last confirmed position (%s) may never have been published", info.ConfirmedFlush)
	}
	return nil
}

// CreateSlot creates a logical pgoutput slot and, while the snapshot it
// exports is valid, calls withSnapshot with a read-only transaction that
// sees the database exactly as of the slot's consistent point: every
// transaction committed before it is visible there, every later one will
// be streamed. It returns the consistent point.
// With opts.Failover the slot is a failover slot (Postgres 17+, see
// CheckFailover).
func CreateSlot(ctx context.Context, repl *pgconn.Config, pool *pgxpool.Pool, slot string, opts SlotOptions, withSnapshot func(ctx context.Context, tx pgx.Tx, point pglogrepl.LSN) error) (pglogrepl.LSN, error) {
	conn, err := pgconn.ConnectConfig(ctx, repl)
	if err != nil {
		return 0, fmt.Errorf("open replication connection to %s: %w", Describe(repl), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	res, err := createNudged(ctx, conn, slot, opts)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == codeConfigLimit {
			return 0, fatal(err, "raise max_replication_slots, or drop a slot nobody uses")
		}
		return 0, fmt.Errorf("create replication slot %q: %w", slot, err)
	}
	point, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return 0, fmt.Errorf("replication slot %q consistent point %q: %w", slot, res.ConsistentPoint, err)
	}
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return point, fmt.Errorf("begin snapshot transaction: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(res.SnapshotName)); err != nil {
		return point, fmt.Errorf("use the snapshot of slot %q: %w", slot, err)
	}
	if err := withSnapshot(ctx, tx, point); err != nil {
		return point, err
	}
	return point, tx.Commit(ctx)
}

// nudgeEvery is how often SlotOptions.Nudge is called while a slot is
// being created; the first call comes after nudgeFirst, once the creation
// has had time to reserve its WAL (a record logged before that is of no
// use to it).
const (
	nudgeFirst = 200 * time.Millisecond
	nudgeEvery = time.Second
)

// createNudged runs createReplicationSlot, calling opts.Nudge meanwhile.
func createNudged(ctx context.Context, conn *pgconn.PgConn, slot string, opts SlotOptions) (pglogrepl.CreateReplicationSlotResult, error) {
	if opts.Nudge == nil {
		return createReplicationSlot(ctx, conn, slot, opts)
	}
	nctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(nudgeFirst)
		defer t.Stop()
		for {
			select {
			case <-nctx.Done():
				return
			case <-t.C:
			}
			opts.Nudge(nctx)
			t.Reset(nudgeEvery)
		}
	}()
	res, err := createReplicationSlot(ctx, conn, slot, opts)
	stop()
	<-done
	return res, err
}

// DropSlot drops the slot, waiting for it to become inactive.
func DropSlot(ctx context.Context, pool *pgxpool.Pool, slot string) error {
	if _, err := pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot); err != nil {
		return fmt.Errorf("drop replication slot %q: %w", slot, err)
	}
	return nil
}

func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}
