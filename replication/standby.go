package replication

import (
	"context"
	"errors"
	"fmt"

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

// CheckStandbyRead verifies the pair of servers a relay reading from a
// standby uses: source, where the slot lives (--pg-url, a hot standby
// or the primary itself), and primary (--primary-url), where the relay
// keeps its record. primary must accept writes and be the same cluster
// as source (one WAL, so that positions compare); a standby source must
// run Postgres 16+ with hot_standby_feedback = on, and the primary
// wal_level = logical. It reports whether source is a standby.
func CheckStandbyRead(ctx context.Context, source, primary Server) (standby bool, err error) {
	if standby, err = inRecovery(ctx, primary.Pool); err != nil {
		return false, err
	}
	if standby {
		return false, fatal(fmt.Errorf("--primary-url names %s, a standby (in recovery): the relay writes its record of the slot there", primary.Where),
			"point --primary-url at the primary (with several hosts, add target_session_attrs=read-write)")
	}
	if err := sameSystem(ctx, source, primary); err != nil {
		return false, err
	}
	if standby, err = inRecovery(ctx, source.Pool); err != nil || !standby {
		return false, err
	}
	var (
		version         int
		text, feedback  string
		primaryWALLevel string
	)
	err = source.Pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, current_setting('server_version'), current_setting('hot_standby_feedback')`).
		Scan(&version, &text, &feedback)
	if err != nil {
		return true, fmt.Errorf("read the standby's settings: %w", err)
	}
	if version < standbyMinVersion {
		return true, fatal(fmt.Errorf("the Postgres server at %s is a standby running %s: logical decoding on a standby needs Postgres 16 or later", source.Where, text),
			"point --pg-url at the primary and drop --primary-url, or upgrade to Postgres 16+")
	}
	if feedback != "on" {
		return true, fatal(fmt.Errorf("the standby at %s has hot_standby_feedback = %s: without it the primary removes catalog rows the standby's logical slot still needs, and Postgres invalidates the slot", source.Where, feedback),
			"set hot_standby_feedback = on on the standby (ALTER SYSTEM SET hot_standby_feedback = on; SELECT pg_reload_conf()), and give it a physical slot on the primary (primary_slot_name)")
	}
	if err := primary.Pool.QueryRow(ctx, `SELECT current_setting('wal_level')`).Scan(&primaryWALLevel); err != nil {
		return true, fmt.Errorf("read the primary's wal_level: %w", err)
	}
	if primaryWALLevel != "logical" {
		return true, fatal(fmt.Errorf("the primary at %s has wal_level = %s: a standby decodes only WAL the primary wrote with wal_level = logical", primary.Where, primaryWALLevel),
			"ALTER SYSTEM SET wal_level = logical on the primary and restart it")
	}
	return true, nil
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
// need).
func sameSystem(ctx context.Context, source, primary Server) error {
	var dbs [2]string
	for i, s := range []Server{source, primary} {
		if err := s.Pool.QueryRow(ctx, `SELECT current_database()`).Scan(&dbs[i]); err != nil {
			return fmt.Errorf("read the database name of %s: %w", s.Where, err)
		}
	}
	if dbs[0] != dbs[1] {
		return fatal(fmt.Errorf("--pg-url names database %q and --primary-url database %q", dbs[0], dbs[1]),
			"name the same database in both: the relay keeps its record in the database of its slot")
	}
	var ids [2]string
	for i, s := range []Server{source, primary} {
		err := s.Pool.QueryRow(ctx, `SELECT system_identifier::text FROM pg_control_system()`).Scan(&ids[i])
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == codeInsufficientPriv {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read the system identifier of %s: %w", s.Where, err)
		}
	}
	if ids[0] != ids[1] {
		return fatal(fmt.Errorf("--pg-url (%s, system %s) and --primary-url (%s, system %s) are different clusters", source.Where, ids[0], primary.Where, ids[1]),
			"--primary-url must name the primary that --pg-url's standby replicates from")
	}
	return nil
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
