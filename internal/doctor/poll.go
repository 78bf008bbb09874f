package doctor

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/poll"
	"github.com/outbox-relay/outbox-relay/replication"
)

// PollOptions are the polling relay's names and settings (run --source
// poll) the Postgres checks judge.
type PollOptions struct {
	Table contract.Table
	// Slot is the WAL relay's slot, which must not exist.
	Slot string
	// Notify says the NOTIFY trigger is meant to be there (migrate
	// --notify).
	Notify bool
	// Batch is --poll-batch: one advisory lock per aggregate, up to Batch.
	Batch int
	// MaxOutage is how long a batch may wait for NATS, its transaction
	// open.
	MaxOutage time.Duration
}

// pollColumns are the columns the polling relay reads or writes
// (migrations 00001 and 00007).
var pollColumns = []string{"id", "aggregate_type", "aggregate_id", "event_type", "payload", "created_at",
	"processed_at", "attempts", "seq", "retry_after", "last_error"}

// pollUpdated are the columns a polling batch updates: the grant
// `migrate --source poll --relay-role` gives.
var pollUpdated = []string{"processed_at", "attempts", "retry_after", "last_error"}

// pollFacts is what the polling checks read from the server.
type pollFacts struct {
	Database string
	Role     string
	Columns  map[string]string
	// NullableAggregate are aggregate_type/aggregate_id when NULL is allowed.
	NullableAggregate []string
	State             migrations.PollState
	Claims            bool
	// Trigger says the NOTIFY trigger exists; TriggerEnabled that it fires.
	Trigger, TriggerEnabled bool
	Grants                  grantFacts
	// NoUpdate are the columns of pollUpdated the role may not update.
	NoUpdate []string
	// ClaimsGranted: the role may read and write the claims table.
	ClaimsGranted bool
	// AdvisoryLock: the role may call pg_try_advisory_xact_lock(int, int).
	AdvisoryLock bool
	// WALSlot: the WAL relay's slot exists.
	WALSlot bool
	// IdleTimeout is idle_in_transaction_session_timeout for this role and
	// database (0 off).
	IdleTimeout time.Duration
	// LockTable is max_locks_per_transaction × max_connections: what the
	// shared lock table holds, roughly.
	MaxLocks, MaxConnections int
	LargestPayload           int64
	PayloadRows              int64
}

// CheckPostgresPoll reads pool's server and judges it for the polling
// relay: what it needs (the polling setup, the claims table, its rights),
// not the WAL relay's replication settings.
func CheckPostgresPoll(ctx context.Context, pool *pgxpool.Pool, o PollOptions) ([]Finding, PGSummary, error) {
	f, err := readPoll(ctx, pool, o)
	if err != nil {
		return nil, PGSummary{}, err
	}
	return pollFindings(f, o), PGSummary{LargestPayload: f.LargestPayload, PayloadRows: f.PayloadRows}, nil
}

func readPoll(ctx context.Context, pool *pgxpool.Pool, o PollOptions) (pollFacts, error) {
	var f pollFacts
	if err := pool.QueryRow(ctx, `SELECT current_database(), current_user`).Scan(&f.Database, &f.Role); err != nil {
		return f, fmt.Errorf("read the database and role: %w", err)
	}
	var err error
	if f.Grants, err = readGrants(ctx, pool, o.Table); err != nil {
		return f, err
	}
	if err := readPollSettings(ctx, pool, o, &f); err != nil {
		return f, err
	}
	if !f.Grants.TableExists {
		return f, nil
	}
	if f.Columns, err = replication.Columns(ctx, pool, o.Table); err != nil {
		return f, err
	}
	names := migrations.Names{Table: o.Table}
	if _, ok := f.Columns["seq"]; ok {
		if f.State, err = migrations.ReadPollState(ctx, pool, names); err != nil {
			return f, err
		}
	}
	claims := pgx.Identifier{o.Table.Schema, poll.ClaimsTable}.Sanitize()
	err = pool.QueryRow(ctx, `SELECT
		EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname = $2),
		EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname = $2 AND tgenabled <> 'D'),
		to_regclass($3) IS NOT NULL,
		COALESCE((SELECT bool_and(has_table_privilege(to_regclass($3), p)) FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) p), false),
		ARRAY(SELECT attname::text FROM pg_attribute WHERE attrelid = $1::regclass AND attname IN ('aggregate_type', 'aggregate_id') AND NOT attnotnull ORDER BY attnum)`,
		o.Table.Quoted(), names.NotifyTrigger(), claims).
		Scan(&f.Trigger, &f.TriggerEnabled, &f.Claims, &f.ClaimsGranted, &f.NullableAggregate)
	if err != nil {
		return f, fmt.Errorf("read the polling setup of %s: %w", o.Table, err)
	}
	for _, c := range pollUpdated {
		if _, ok := f.Columns[c]; !ok {
			continue // the table finding says so
		}
		var may bool
		if err := pool.QueryRow(ctx, `SELECT has_column_privilege($1::regclass, $2, 'UPDATE')`, o.Table.Quoted(), c).Scan(&may); err != nil {
			return f, fmt.Errorf("read the role's privileges on %s.%s: %w", o.Table, c, err)
		}
		if !may {
			f.NoUpdate = append(f.NoUpdate, c)
		}
	}
	if f.Grants.TableSelect && f.Columns["payload"] != "" && f.Columns["processed_at"] != "" {
		err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT coalesce(max(octet_length(payload::text)), 0), count(*) FROM (SELECT payload FROM %s WHERE processed_at IS NULL LIMIT %d) s`,
			o.Table.Quoted(), payloadSample)).Scan(&f.LargestPayload, &f.PayloadRows)
		if err != nil {
			return f, fmt.Errorf("read the payload sizes of %s: %w", o.Table, err)
		}
	}
	return f, nil
}

// readPollSettings reads what does not depend on the table: the advisory
// lock right, the WAL relay's slot, the settings.
func readPollSettings(ctx context.Context, pool *pgxpool.Pool, o PollOptions, f *pollFacts) error {
	var idle, locks, conns string
	err := pool.QueryRow(ctx, `SELECT
		has_function_privilege('pg_catalog.pg_try_advisory_xact_lock(integer, integer)', 'EXECUTE'),
		EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1),
		current_setting('idle_in_transaction_session_timeout'),
		(SELECT setting FROM pg_settings WHERE name = 'max_locks_per_transaction'),
		(SELECT setting FROM pg_settings WHERE name = 'max_connections')`, o.Slot).
		Scan(&f.AdvisoryLock, &f.WALSlot, &idle, &locks, &conns)
	if err != nil {
		return fmt.Errorf("read the polling relay's rights and settings: %w", err)
	}
	if f.IdleTimeout, err = pgDuration(idle); err != nil {
		return fmt.Errorf("read idle_in_transaction_session_timeout %q: %w", idle, err)
	}
	f.MaxLocks, _ = strconv.Atoi(locks)
	f.MaxConnections, _ = strconv.Atoi(conns)
	return nil
}

// pgDuration parses a time setting as current_setting shows it: "0",
// "500ms", "5s", "10min", "1h", "1d".
func pgDuration(s string) (time.Duration, error) {
	units := []struct {
		suffix string
		unit   time.Duration
	}{{"ms", time.Millisecond}, {"us", time.Microsecond}, {"min", time.Minute}, {"s", time.Second}, {"h", time.Hour}, {"d", 24 * time.Hour}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok && n != "" {
			v, err := strconv.ParseInt(n, 10, 64)
			return time.Duration(v) * u.unit, err
		}
	}
	v, err := strconv.ParseInt(s, 10, 64) // no unit: milliseconds
	return time.Duration(v) * time.Millisecond, err
}
