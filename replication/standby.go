package replication

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// standbyMinVersion is the first server_version_num that decodes on a
// standby (logical slots during recovery).
const standbyMinVersion = 160000

// Server is what CheckStandbyRead reads of one server.
type Server struct {
	Pool  *pgxpool.Pool
	Where string // Describe's text, for messages
}

// StandbyRead is what CheckStandbyRead found: the pair is fit to read
// from, and Warnings (one sentence each, with the fix) say what works but
// slowly, or what could not be checked.
type StandbyRead struct {
	Warnings []string
}

// CheckStandbyRead verifies the pair of servers a relay reading from a
// standby uses: source, where the slot lives (--pg-url, a hot standby),
// and primary (--primary-url), where the relay keeps its record. primary
// must accept writes and be the same cluster as source (one WAL, so that
// positions compare); source must be in recovery (a primary named by both
// is refused rather than accepted: after a promotion, a relay still given
// the old primary's --primary-url would keep its record there, on a
// cluster no longer its slot's), run Postgres 16+ with
// hot_standby_feedback = on, and the primary wal_level = logical.
func CheckStandbyRead(ctx context.Context, source, primary Server) (StandbyRead, error) {
	var found StandbyRead
	standby, err := inRecovery(ctx, primary.Pool)
	if err != nil {
		return found, err
	}
	if standby {
		return found, fatal(fmt.Errorf("--primary-url names %s, a standby (in recovery): the relay writes its record of the slot there", primary.Where),
			"point --primary-url at the primary (with several hosts, add target_session_attrs=read-write)")
	}
	if standby, err = inRecovery(ctx, source.Pool); err != nil {
		return found, err
	}
	if !standby {
		return found, fatal(fmt.Errorf("--pg-url names %s, a primary (not in recovery), and --primary-url is for reading from a standby", source.Where),
			"--pg-url is a primary: drop --primary-url (the relay then keeps its record on --pg-url), or point --pg-url at a hot standby (after a promotion, at a standby of the new primary, and --primary-url at the new primary)")
	}
	if warn, err := sameSystem(ctx, source, primary); err != nil {
		return found, err
	} else if warn != "" {
		found.Warnings = append(found.Warnings, warn)
	}
	if err := checkStandbySettings(ctx, source, primary); err != nil {
		return found, err
	}
	warns, err := replayWarnings(ctx, source)
	if err != nil {
		return found, err
	}
	found.Warnings = append(found.Warnings, warns...)
	if warn, err := nudgeGrant(ctx, primary); err != nil {
		return found, err
	} else if warn != "" {
		found.Warnings = append(found.Warnings, warn)
	}
	return found, nil
}

// checkStandbySettings refuses what decoding on the standby cannot do
// without: Postgres 16+, hot_standby_feedback, the primary's wal_level.
func checkStandbySettings(ctx context.Context, source, primary Server) error {
	var (
		version         int
		text, feedback  string
		primaryWALLevel string
	)
	err := source.Pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, current_setting('server_version'), current_setting('hot_standby_feedback')`).
		Scan(&version, &text, &feedback)
	if err != nil {
		return fmt.Errorf("read the standby's settings: %w", err)
	}
	if version < standbyMinVersion {
		return fatal(fmt.Errorf("the Postgres server at %s is a standby running %s: logical decoding on a standby needs Postgres 16 or later", source.Where, text),
			"point --pg-url at the primary and drop --primary-url, or upgrade to Postgres 16+")
	}
	if feedback != "on" {
		return fatal(fmt.Errorf("the standby at %s has hot_standby_feedback = %s: without it the primary removes catalog rows the standby's logical slot still needs, and Postgres invalidates the slot", source.Where, feedback),
			"set hot_standby_feedback = on on the standby (ALTER SYSTEM SET hot_standby_feedback = on; SELECT pg_reload_conf()), and give it a physical slot on the primary (primary_slot_name)")
	}
	if err := primary.Pool.QueryRow(ctx, `SELECT current_setting('wal_level')`).Scan(&primaryWALLevel); err != nil {
		return fmt.Errorf("read the primary's wal_level: %w", err)
	}
	if primaryWALLevel != "logical" {
		return fatal(fmt.Errorf("the primary at %s has wal_level = %s: a standby decodes only WAL the primary wrote with wal_level = logical", primary.Where, primaryWALLevel),
			"ALTER SYSTEM SET wal_level = logical on the primary and restart it")
	}
	return nil
}

// replayWarnings warns of a standby that does not replay now, or replays
// late: the relay sees events only once replayed, and creating its slot
// waits for a record the primary writes to be replayed.
func replayWarnings(ctx context.Context, source Server) ([]string, error) {
	var (
		pause string
		delay int64 // ms
	)
	err := source.Pool.QueryRow(ctx, `SELECT pg_get_wal_replay_pause_state(), (SELECT setting::bigint FROM pg_settings WHERE name = 'recovery_min_apply_delay')`).
		Scan(&pause, &delay)
	if err != nil {
		return nil, fmt.Errorf("read the standby's replay state: %w", err)
	}
	var warns []string
	if pause != "not paused" {
		warns = append(warns, fmt.Sprintf("replay is paused on the standby at %s (replay pause state %q): the relay publishes nothing committed since, and creating its slot waits, until SELECT pg_wal_replay_resume() on the standby", source.Where, pause))
	}
	if delay > 0 {
		warns = append(warns, fmt.Sprintf("the standby at %s has recovery_min_apply_delay = %s: events reach the relay that late, and creating its slot waits at least that long; read from a standby that does not delay replay (recovery_min_apply_delay = 0)", source.Where, time.Duration(delay)*time.Millisecond))
	}
	return warns, nil
}

// nudgeGrant warns when the role may not call pg_log_standby_snapshot()
// on the primary (it is revoked from PUBLIC): creating the slot then
// waits for the record the primary writes every 15 s or so.
func nudgeGrant(ctx context.Context, primary Server) (string, error) {
	var (
		may  bool
		role string
	)
	err := primary.Pool.QueryRow(ctx, `SELECT has_function_privilege('pg_catalog.pg_log_standby_snapshot()', 'EXECUTE'), current_user`).Scan(&may, &role)
	if err != nil {
		return "", fmt.Errorf("read whether the role may call pg_log_standby_snapshot() on the primary: %w", err)
	}
	if may {
		return "", nil
	}
	return fmt.Sprintf("role %s may not call pg_log_standby_snapshot() on the primary at %s: creating the slot on the standby waits for the running-transactions record Postgres writes every 15 s or so; to start faster, GRANT EXECUTE ON FUNCTION pg_log_standby_snapshot() TO %s on the primary as a superuser (outbox-relay migrate --relay-role does)",
		role, primary.Where, pgx.Identifier{role}.Sanitize()), nil
}

// CheckStandbySlot refuses a slot name the relay reading from the standby
// cannot use: one the primary has a logical slot of (another relay, or
// this one before --primary-url: two slots of one name on two servers
// would each be taken for the other by anyone reading one of them), and,
// on Postgres 17+, a standby slot that is a failover copy of the
// primary's (synced: it cannot be streamed from until the standby is
// promoted).
func CheckStandbySlot(ctx context.Context, source, primary Server, slot string) error {
	var onPrimary bool
	err := primary.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND slot_type = 'logical')`, slot).Scan(&onPrimary)
	if err != nil {
		return fmt.Errorf("look up replication slot %q on the primary: %w", slot, err)
	}
	if onPrimary {
		return fatal(fmt.Errorf("another relay, or this one before --primary-url, uses slot %s on the primary (%s)", slot, primary.Where),
			"choose another --slot, or stop it and drop that slot (SELECT pg_drop_replication_slot('%s') on the primary)", slot)
	}
	var version int
	if err := source.Pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return fmt.Errorf("read the standby's version: %w", err)
	}
	if version < 170000 {
		return nil
	}
	var synced bool
	err = source.Pool.QueryRow(ctx, `SELECT synced FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&synced)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up replication slot %q on the standby: %w", slot, err)
	}
	if synced {
		return fatal(fmt.Errorf("replication slot %q on the standby (%s) is a failover copy of the primary's slot of that name (synced = true): it cannot be streamed from, and it belongs to whoever reads that slot on the primary", slot, source.Where),
			"choose another --slot; a synced slot goes when the primary's is dropped and the standby syncs again")
	}
	return nil
}

// StandbySlotLost is the error for a slot on the standby that Postgres
// invalidated; reason is pg_replication_slots' (ReadSlotHealth). On a
// standby that is most often a conflict with recovery: the primary
// removed catalog rows the slot needed.
func StandbySlotLost(slot string, info SlotInfo, reason string) error {
	if reason == "" {
		reason = "unknown reason"
	}
	return gap(fmt.Errorf("replication slot %q on the standby was invalidated (%s)", slot, reason),
		"events committed after its last confirmed position (%s) may never have been published; on a standby keep hot_standby_feedback = on and give it a physical slot on the primary (primary_slot_name), so that the primary keeps the catalog rows the slot needs", info.ConfirmedFlush)
}

func inRecovery(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var in bool
	if err := pool.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&in); err != nil {
		return false, fmt.Errorf("read whether the server is a standby: %w", err)
	}
	return in, nil
}

// sameSystem refuses two servers of different clusters (the record's
// positions would say nothing about the slot's) and two databases (the
// record is the slot's database's). A role that may not read
// pg_control_system() skips the cluster check (it is a safeguard, not a
// need): it returns a warning saying so.
func sameSystem(ctx context.Context, source, primary Server) (string, error) {
	var dbs [2]string
	for i, s := range []Server{source, primary} {
		if err := s.Pool.QueryRow(ctx, `SELECT current_database()`).Scan(&dbs[i]); err != nil {
			return "", fmt.Errorf("read the database name of %s: %w", s.Where, err)
		}
	}
	if dbs[0] != dbs[1] {
		return "", fatal(fmt.Errorf("--pg-url names database %q and --primary-url database %q", dbs[0], dbs[1]),
			"name the same database in both: the relay keeps its record in the database of its slot")
	}
	var ids [2]string
	for i, s := range []Server{source, primary} {
		err := s.Pool.QueryRow(ctx, `SELECT system_identifier::text FROM pg_control_system()`).Scan(&ids[i])
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == codeInsufficientPriv {
			return fmt.Sprintf("the role may not call pg_control_system() on %s: the relay could not check that --pg-url and --primary-url are one cluster; GRANT EXECUTE ON FUNCTION pg_control_system() TO the relay's role to have it checked", s.Where), nil
		}
		if err != nil {
			return "", fmt.Errorf("read the system identifier of %s: %w", s.Where, err)
		}
	}
	if ids[0] != ids[1] {
		return "", fatal(fmt.Errorf("--pg-url (%s, system %s) and --primary-url (%s, system %s) are different clusters", source.Where, ids[0], primary.Where, ids[1]),
			"--primary-url must name the primary that --pg-url's standby replicates from")
	}
	return "", nil
}

// LogStandbySnapshot asks the primary to write a running-transactions
// record now (pg_log_standby_snapshot, Postgres 16+): a logical slot being
// created on a standby waits for one.
func LogStandbySnapshot(ctx context.Context, primary *pgxpool.Pool) error {
	if _, err := primary.Exec(ctx, `SELECT pg_log_standby_snapshot()`); err != nil {
		return fmt.Errorf("ask the primary for a running-transactions record (SELECT pg_log_standby_snapshot()): %w", err)
	}
	return nil
}

// CheckOneHost refuses a --pg-url naming more than one server (hosts to
// fall back on) when reading from a standby: the pool, the replication
// connection and the import of the snapshot the slot exports must reach
// the same standby, the one the slot is on. Fallbacks of the same host
// (sslmode=prefer tries TLS, then not) are one server.
func CheckOneHost(c *pgconn.Config) error {
	hosts := []string{fmt.Sprintf("%s:%d", c.Host, c.Port)}
	for _, f := range c.Fallbacks {
		if h := fmt.Sprintf("%s:%d", f.Host, f.Port); !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	if len(hosts) == 1 {
		return nil
	}
	return fatal(fmt.Errorf("--pg-url names %d servers (%s): reading from a standby (--primary-url), --pg-url must name exactly one standby", len(hosts), strings.Join(hosts, ", ")),
		"keep one host in --pg-url: the slot, its replication connection and the snapshot it exports at its creation must be on one server (a load balancer in front of several standbys does not guarantee it either)")
}

// Replay is how far a standby's replay is behind its primary.
type Replay struct {
	LagBytes   int64         // the primary's WAL position - the standby's replay position
	Delay      time.Duration // since the last transaction replayed committed on the primary (0 when unknown)
	PauseState string        // pg_get_wal_replay_pause_state()
}

// ReadReplay reads Replay of standby, whose primary is primary.
func ReadReplay(ctx context.Context, standby, primary *pgxpool.Pool) (Replay, error) {
	var (
		r       Replay
		replay  pglogrepl.LSN
		delay   *float64
		current pglogrepl.LSN
	)
	err := standby.QueryRow(ctx, `SELECT pg_last_wal_replay_lsn(), extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8, pg_get_wal_replay_pause_state()`).
		Scan(&replay, &delay, &r.PauseState)
	if err != nil {
		return r, fmt.Errorf("read the standby's replay position: %w", err)
	}
	if err := primary.QueryRow(ctx, `SELECT pg_current_wal_lsn()`).Scan(&current); err != nil {
		return r, fmt.Errorf("read the primary's WAL position: %w", err)
	}
	r.LagBytes = int64(current) - int64(replay)
	if delay != nil {
		r.Delay = time.Duration(*delay * float64(time.Second)).Round(time.Millisecond)
	}
	return r, nil
}
