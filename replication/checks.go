package replication

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
)

// Problem is one thing that keeps the relay from streaming, with its fix.
type Problem struct {
	// Check names what was checked: one of the Problem* constants.
	Check string
	What  string
	Fix   string
}

func (p Problem) String() string { return p.What + ": " + p.Fix }

// The checks Preflight runs, as Problem.Check names them.
const (
	ProblemWALLevel    = "wal_level"
	ProblemRole        = "role"
	ProblemPublication = "publication"
	ProblemTable       = "table"
)

// Check verifies, read-only, what streaming needs: wal_level, the role's
// REPLICATION attribute, the publication and the table's membership, and
// the table's columns. It reports every problem found, each with its fix.
func Check(ctx context.Context, pool *pgxpool.Pool, table contract.Table, publication string) error {
	return CheckTables(ctx, pool, []contract.Table{table}, publication)
}

// CheckTables is Check for a relay of several tables: every table's
// membership and columns.
func CheckTables(ctx context.Context, pool *pgxpool.Pool, tables []contract.Table, publication string) error {
	problems, err := PreflightTables(ctx, pool, tables, publication)
	if err != nil || len(problems) == 0 {
		return err
	}
	return &contract.FatalError{Err: errors.New("Postgres is not ready for the relay"), Hint: "\n  - " + joinProblems(problems, "\n  - ")}
}

// Preflight returns, read-only, every problem of Check's; an error means
// Postgres could not be asked.
func Preflight(ctx context.Context, pool *pgxpool.Pool, table contract.Table, publication string) ([]Problem, error) {
	return PreflightTables(ctx, pool, []contract.Table{table}, publication)
}

// PreflightTables is Preflight for a relay of several tables: the server
// and the role once, the publication and the columns of every table.
func PreflightTables(ctx context.Context, pool *pgxpool.Pool, tables []contract.Table, publication string) ([]Problem, error) {
	var problems []Problem
	var walLevel string
	if err := pool.QueryRow(ctx, `SELECT current_setting('wal_level')`).Scan(&walLevel); err != nil {
		return nil, fmt.Errorf("check wal_level: %w", err)
	}
	if walLevel != "logical" {
		problems = append(problems, Problem{ProblemWALLevel, fmt.Sprintf("wal_level is %q, logical decoding needs \"logical\"", walLevel),
			"run ALTER SYSTEM SET wal_level = logical (or set it in postgresql.conf; on RDS rds.logical_replication = 1 in the parameter group, on Cloud SQL the flag cloudsql.logical_decoding = on) and restart Postgres"})
	}
	role, err := ReadRole(ctx, pool)
	if err != nil {
		return nil, err
	}
	if !role.CanReplicate() {
		problems = append(problems, Problem{ProblemRole, fmt.Sprintf("role %q lacks the REPLICATION attribute", role.Name),
			fmt.Sprintf("run ALTER ROLE %s REPLICATION (as a superuser; on RDS: GRANT rds_replication TO %s)", pgx.Identifier{role.Name}.Sanitize(), pgx.Identifier{role.Name}.Sanitize())})
	}
	for _, table := range tables {
		pubProblems, err := checkPublication(ctx, pool, table, publication)
		if err != nil {
			return nil, err
		}
		problems = append(problems, pubProblems...)
		cols, err := checkColumns(ctx, pool, table)
		if err != nil {
			return nil, err
		}
		problems = append(problems, cols...)
	}
	return dedupProblems(problems), nil
}

// dedupProblems drops repeated problems (a missing publication is found
// once per table).
func dedupProblems(problems []Problem) []Problem {
	out := problems[:0]
	seen := map[Problem]bool{}
	for _, p := range problems {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// Role is what the connected role may do that matters for replication.
type Role struct {
	Name        string
	Replication bool // the REPLICATION attribute
	Superuser   bool
	// RDSReplication: member of rds_replication (Amazon RDS and Aurora,
	// where it stands in for the attribute).
	RDSReplication bool
}

// CanReplicate reports whether the role may open a replication connection.
func (r Role) CanReplicate() bool { return r.Replication || r.Superuser || r.RDSReplication }

// ReadRole reads the connected role's attributes.
func ReadRole(ctx context.Context, db Querier) (Role, error) {
	var r Role
	err := db.QueryRow(ctx, `SELECT rolname, rolreplication, rolsuper,
			COALESCE((SELECT pg_has_role(current_user, oid, 'member') FROM pg_roles WHERE rolname = 'rds_replication'), false)
		FROM pg_roles WHERE rolname = current_user`).Scan(&r.Name, &r.Replication, &r.Superuser, &r.RDSReplication)
	if err != nil {
		return r, fmt.Errorf("check the role's attributes: %w", err)
	}
	return r, nil
}

func joinProblems(problems []Problem, sep string) string {
	s := make([]string, len(problems))
	for i, p := range problems {
		s[i] = p.String()
	}
	return strings.Join(s, sep)
}

// CheckPublication verifies that the publication still exists, publishes
// inserts and contains the table. The relay runs it before confirming
// progress: with the table out of the publication, Postgres would send
// nothing for it and confirming keepalives would skip its inserts.
func CheckPublication(ctx context.Context, pool *pgxpool.Pool, table contract.Table, publication string) error {
	return CheckPublicationTables(ctx, pool, []contract.Table{table}, publication)
}

// CheckPublicationTables is CheckPublication for every table of a relay
// of several.
func CheckPublicationTables(ctx context.Context, pool *pgxpool.Pool, tables []contract.Table, publication string) error {
	var problems []Problem
	for _, table := range tables {
		p, err := checkPublication(ctx, pool, table, publication)
		if err != nil {
			return err
		}
		problems = append(problems, p...)
	}
	if problems = dedupProblems(problems); len(problems) == 0 {
		return nil
	}
	return gap(errors.New("the publication changed under the relay: "+joinProblems(problems, "; ")),
		"inserts made while the table was not published were not decoded: restore the publication first")
}

// checkPublication returns the publication's problems; an error means it
// could not be read.
func checkPublication(ctx context.Context, pool *pgxpool.Pool, table contract.Table, publication string) ([]Problem, error) {
	var insert, allTables, viaRoot, partitioned bool
	err := pool.QueryRow(ctx, `SELECT pubinsert, puballtables, pubviaroot,
			coalesce((SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass($2)), false)
		FROM pg_publication WHERE pubname = $1`, publication, table.Quoted()).Scan(&insert, &allTables, &viaRoot, &partitioned)
	if errors.Is(err, pgx.ErrNoRows) {
		return []Problem{{ProblemPublication, fmt.Sprintf("publication %q does not exist", publication),
			fmt.Sprintf("run `outbox-relay migrate`, or CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')", publication, table.Quoted())}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read publication %q: %w", publication, err)
	}
	var out []Problem
	if !insert {
		out = append(out, Problem{ProblemPublication, fmt.Sprintf("publication %q does not publish inserts", publication),
			fmt.Sprintf("ALTER PUBLICATION %s SET (publish = 'insert')", publication)})
	}
	if partitioned && !viaRoot {
		// pgoutput would name each partition, never the table the relay
		// decodes: every insert would be skipped.
		return append(out, Problem{ProblemPublication, fmt.Sprintf("table %s is partitioned and publication %q sends its inserts as the partitions'", table, publication),
			fmt.Sprintf("ALTER PUBLICATION %s SET (publish_via_partition_root = true) before the relay's first start", publication)}), nil
	}
	var member bool
	err = pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)`,
		publication, table.Schema, table.Name).Scan(&member)
	if err != nil {
		return nil, fmt.Errorf("read the tables of publication %q: %w", publication, err)
	}
	if !member {
		out = append(out, Problem{ProblemPublication, fmt.Sprintf("table %s is not in publication %q", table, publication),
			fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", publication, table.Quoted())})
	}
	return out, nil
}

// Columns returns the table's columns and their type names; an empty map
// when the table does not exist.
func Columns(ctx context.Context, pool *pgxpool.Pool, table contract.Table) (map[string]string, error) {
	rows, err := pool.Query(ctx, `SELECT a.attname, format_type(a.atttypid, NULL) FROM pg_attribute a
		WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`, table.Quoted())
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", table, err)
	}
	cols := map[string]string{}
	var name, typ string
	_, err = pgx.ForEachRow(rows, []any{&name, &typ}, func() error {
		cols[name] = typ
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", table, err)
	}
	return cols, nil
}

func checkColumns(ctx context.Context, pool *pgxpool.Pool, table contract.Table) ([]Problem, error) {
	have, err := Columns(ctx, pool, table)
	if err != nil {
		return nil, err
	}
	if len(have) == 0 {
		return []Problem{{ProblemTable, fmt.Sprintf("table %s does not exist", table), "create it by running `outbox-relay migrate` for this table"}}, nil
	}
	var missing []string
	for _, c := range decode.RequiredColumns {
		if _, ok := have[c]; !ok {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return []Problem{{ProblemTable, fmt.Sprintf("table %s has no column %s", table, strings.Join(missing, ", ")),
			fmt.Sprintf("the relay needs %s", strings.Join(decode.RequiredColumns, ", "))}}, nil
	}
	return nil, nil
}

// PublicationIdentity describes how the publication holds the table, in a
// form that changes whenever pgoutput may have stopped sending the table's
// inserts, even for a moment:
//   - the publication recreated (its oid);
//   - its options altered (the catalog row's xmin: publishing inserts
//     switched off and back on leaves no other trace; a rename or a new
//     owner counts too, which errs on the safe side);
//   - the table, or its schema, dropped from it and added back (the
//     membership's oid);
//   - a row filter or a column list added (Postgres 15+).
//
// The relay records it with its slot and refuses to go on when it differs.
func PublicationIdentity(ctx context.Context, db Querier, table contract.Table, publication string) (string, error) {
	var version int
	if err := db.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return "", fmt.Errorf("read the server version: %w", err)
	}
	filter := `NULL::text`
	if version >= 150000 {
		filter = `concat_ws(' ', 'filter=' || (r.prqual IS NOT NULL), 'columns=' || (r.prattrs IS NOT NULL),
			'schema_membership=' || coalesce((SELECT n.oid::text FROM pg_publication_namespace n
				WHERE n.pnpubid = p.oid AND n.pnnspid = (SELECT relnamespace FROM pg_class WHERE oid = to_regclass($2))), 'none'))`
	}
	var id string
	err := db.QueryRow(ctx, `SELECT concat_ws(' ',
			'publication=' || p.oid || '/' || p.xmin, 'insert=' || p.pubinsert, 'all_tables=' || p.puballtables, 'via_root=' || p.pubviaroot,
			'membership=' || coalesce(r.oid::text, 'none'), `+filter+`)
		FROM pg_publication p
		LEFT JOIN pg_publication_rel r ON r.prpubid = p.oid AND r.prrelid = to_regclass($2)
		WHERE p.pubname = $1`, publication, table.Quoted()).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("publication %q does not exist", publication)
	}
	if err != nil {
		return "", fmt.Errorf("read publication %q: %w", publication, err)
	}
	return id, nil
}

// PublicationIdentities is PublicationIdentity for a relay of several
// tables: for one table, that table's identity (what relays of one table
// always recorded); for several, each table's, named and joined, so that
// it changes when any changes, and when the set of tables does.
func PublicationIdentities(ctx context.Context, db Querier, tables []contract.Table, publication string) (string, error) {
	if len(tables) == 1 {
		return PublicationIdentity(ctx, db, tables[0], publication)
	}
	ids := make([]string, len(tables))
	for i, t := range tables {
		id, err := PublicationIdentity(ctx, db, t, publication)
		if err != nil {
			return "", err
		}
		ids[i] = t.String() + ": " + id
	}
	return strings.Join(ids, "; "), nil
}

// Querier runs a query that returns one row: a pool, a connection or a
// transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
