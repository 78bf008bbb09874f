package doctor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/replication"
)

// PGOptions are the relay's names and settings the Postgres checks judge.
type PGOptions struct {
	// Table is the outbox table, the first of several when MoreTables
	// names others (the relay keeps its records in its schema).
	Table contract.Table
	// MoreTables are the further tables of a relay of several.
	MoreTables  []contract.Table
	Publication string
	Slot        string
	// StatusInterval is the relay's --status-interval: wal_sender_timeout
	// must leave room for it.
	StatusInterval time.Duration
}

// tables returns every table, Table first.
func (o PGOptions) tables() []contract.Table {
	return append([]contract.Table{o.Table}, o.MoreTables...)
}

// tableNames names every table, comma-separated.
func (o PGOptions) tableNames() string { return contract.JoinTables(o.tables()) }

// payloadSample is how many rows the largest-payload check reads: enough
// to see the usual sizes, bounded on a table of millions.
const payloadSample = 10000

// managedFlags are the settings of managed services that switch logical
// decoding on; shown when the server has them.
var managedFlags = []string{"rds.logical_replication", "cloudsql.logical_decoding"}

// pgFacts is what the Postgres checks read from the server.
type pgFacts struct {
	Version   int
	Database  string
	Preflight []replication.Problem
	Role      replication.Role
	// Settings hold pg_settings.setting (in its unit: max_slot_wal_keep_size
	// in MB, wal_sender_timeout in ms) of the settings the checks read and
	// of the managed-service flags the server has.
	Settings    map[string]string
	SlotsUsed   int
	SendersUsed int
	Pub         pubFacts
	Grants      grantFacts
	// MoreGrants are the role's privileges on the further tables of a
	// relay of several (PGOptions.MoreTables), in their order.
	MoreGrants []tableGrant
	Slot       replication.SlotInfo
	// Invalidated is why Postgres invalidated the slot (16+: conflicting
	// with recovery, 17+: invalidation_reason), "" when it did not.
	Invalidated string
	// InactiveSince is when the slot became inactive (17+), zero when
	// unknown or active.
	InactiveSince time.Time
	// LargestPayload is the largest payload, in bytes, among the sampled
	// rows; PayloadRows how many rows were read.
	LargestPayload int64
	PayloadRows    int64
	// Others are the other slots recorded in the records table;
	// OthersErr says why they could not be read.
	Others    []checkpoint.OtherSlot
	OthersErr string
}

type pubFacts struct {
	Exists, Insert, Update, Delete, Truncate, AllTables bool
}

// grantFacts are the privileges of the connected role that the relay needs.
type grantFacts struct {
	TableExists, SchemaUsage, TableSelect, Connect bool
	// Relay is, per bookkeeping table of the relay, whether it exists and
	// the privileges it needs are granted.
	Relay []relayGrant
}

// tableGrant is what the role may do with one further outbox table.
type tableGrant struct {
	Table                        contract.Table
	Exists, SchemaUsage, CanRead bool
}

type relayGrant struct {
	Table      string
	Privileges string
	Exists     bool
	Granted    bool
}

// CheckPostgres reads pool's server and judges it. The facts it read come
// back too: the NATS checks compare the largest payload with the limits.
func CheckPostgres(ctx context.Context, pool *pgxpool.Pool, o PGOptions) ([]Finding, PGSummary, error) {
	f, err := readPG(ctx, pool, o)
	if err != nil {
		return nil, PGSummary{}, err
	}
	return pgFindings(f, o), PGSummary{LargestPayload: f.LargestPayload, PayloadRows: f.PayloadRows}, nil
}

// PGSummary is what the NATS checks need to know of Postgres.
type PGSummary struct {
	LargestPayload int64
	PayloadRows    int64
}

func readPG(ctx context.Context, pool *pgxpool.Pool, o PGOptions) (pgFacts, error) {
	f := pgFacts{Settings: map[string]string{}}
	var err error
	if err = pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, current_database()`).Scan(&f.Version, &f.Database); err != nil {
		return f, fmt.Errorf("read the server version: %w", err)
	}
	if f.Preflight, err = replication.PreflightTables(ctx, pool, o.tables(), o.Publication); err != nil {
		return f, err
	}
	if f.Role, err = replication.ReadRole(ctx, pool); err != nil {
		return f, err
	}
	names := append([]string{"max_replication_slots", "max_wal_senders", "max_slot_wal_keep_size", "wal_sender_timeout"}, managedFlags...)
	rows, err := pool.Query(ctx, `SELECT name, setting FROM pg_settings WHERE name = ANY($1)`, names)
	if err != nil {
		return f, fmt.Errorf("read settings: %w", err)
	}
	var name, setting string
	if _, err := pgx.ForEachRow(rows, []any{&name, &setting}, func() error { f.Settings[name] = setting; return nil }); err != nil {
		return f, fmt.Errorf("read settings: %w", err)
	}
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots), (SELECT count(*) FROM pg_stat_replication)`).
		Scan(&f.SlotsUsed, &f.SendersUsed); err != nil {
		return f, fmt.Errorf("count replication slots and WAL senders: %w", err)
	}
	if f.Pub, err = readPublication(ctx, pool, o.Publication); err != nil {
		return f, err
	}
	if f.Grants, err = readGrants(ctx, pool, o.Table); err != nil {
		return f, err
	}
	var readable []contract.Table
	if f.Grants.TableExists && f.Grants.TableSelect {
		readable = append(readable, o.Table)
	}
	for _, t := range o.MoreTables {
		g, err := readTableGrant(ctx, pool, t)
		if err != nil {
			return f, err
		}
		f.MoreGrants = append(f.MoreGrants, g)
		if g.Exists && g.CanRead {
			readable = append(readable, t)
		}
	}
	if err := readSlot(ctx, pool, o.Slot, &f); err != nil {
		return f, err
	}
	readOthers(ctx, pool, o, &f)
	if hasProblem(f.Preflight, replication.ProblemTable) {
		return f, nil
	}
	for _, t := range readable {
		if err := readPayloads(ctx, pool, t, &f); err != nil {
			return f, err
		}
	}
	return f, nil
}

// readPayloads samples the payload sizes of table into f: the largest of
// every table read, and the rows read in all.
func readPayloads(ctx context.Context, pool *pgxpool.Pool, table contract.Table, f *pgFacts) error {
	var largest, rows int64
	err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT coalesce(max(octet_length(payload::text)), 0), count(*) FROM (SELECT payload FROM %s LIMIT %d) s`,
		table.Quoted(), payloadSample)).Scan(&largest, &rows)
	if err != nil {
		return fmt.Errorf("read the payload sizes of %s: %w", table, err)
	}
	f.LargestPayload, f.PayloadRows = max(f.LargestPayload, largest), f.PayloadRows+rows
	return nil
}

// readTableGrant reads what the role may do with a further outbox table.
func readTableGrant(ctx context.Context, pool *pgxpool.Pool, table contract.Table) (tableGrant, error) {
	g := tableGrant{Table: table}
	err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL,
			CASE WHEN EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $2) THEN has_schema_privilege($2, 'USAGE') ELSE false END,
			COALESCE(has_table_privilege(to_regclass($1), 'SELECT'), false)`,
		table.Quoted(), table.Schema).Scan(&g.Exists, &g.SchemaUsage, &g.CanRead)
	if err != nil {
		return g, fmt.Errorf("read the role's privileges on %s: %w", table, err)
	}
	return g, nil
}

func readPublication(ctx context.Context, pool *pgxpool.Pool, publication string) (pubFacts, error) {
	p := pubFacts{Exists: true}
	err := pool.QueryRow(ctx, `SELECT pubinsert, pubupdate, pubdelete, pubtruncate, puballtables FROM pg_publication WHERE pubname = $1`, publication).
		Scan(&p.Insert, &p.Update, &p.Delete, &p.Truncate, &p.AllTables)
	if errors.Is(err, pgx.ErrNoRows) {
		return pubFacts{}, nil
	}
	if err != nil {
		return p, fmt.Errorf("read publication %q: %w", publication, err)
	}
	return p, nil
}

func readGrants(ctx context.Context, pool *pgxpool.Pool, table contract.Table) (grantFacts, error) {
	var g grantFacts
	err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL,
			CASE WHEN EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $2) THEN has_schema_privilege($2, 'USAGE') ELSE false END,
			COALESCE(has_table_privilege(to_regclass($1), 'SELECT'), false),
			has_database_privilege(current_database(), 'CONNECT')`,
		table.Quoted(), table.Schema).Scan(&g.TableExists, &g.SchemaUsage, &g.TableSelect, &g.Connect)
	if err != nil {
		return g, fmt.Errorf("read the role's privileges: %w", err)
	}
	for _, t := range []relayGrant{
		{Table: checkpoint.RecordsTable, Privileges: "SELECT, INSERT, UPDATE, DELETE"},
		{Table: checkpoint.DeadLettersTable, Privileges: "SELECT, INSERT, UPDATE"},
	} {
		name := pgx.Identifier{table.Schema, t.Table}.Sanitize()
		// has_table_privilege with a list is true when any is held: ask
		// for each.
		err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL,
				COALESCE((SELECT bool_and(has_table_privilege(to_regclass($1), p)) FROM unnest(string_to_array($2, ', ')) p), false)`,
			name, t.Privileges).Scan(&t.Exists, &t.Granted)
		if err != nil {
			return g, fmt.Errorf("read the role's privileges on %s: %w", name, err)
		}
		t.Table = name
		g.Relay = append(g.Relay, t)
	}
	return g, nil
}

func readSlot(ctx context.Context, pool *pgxpool.Pool, slot string, f *pgFacts) error {
	var err error
	if f.Slot, err = replication.LookupSlot(ctx, pool, slot); err != nil || !f.Slot.Exists {
		return err
	}
	h, err := replication.ReadSlotHealth(ctx, pool, slot)
	f.Invalidated, f.InactiveSince = h.Invalidated, h.InactiveSince
	return err
}

func hasProblem(ps []replication.Problem, check string) bool {
	for _, p := range ps {
		if p.Check == check {
			return true
		}
	}
	return false
}
