// Package migrations holds the SQL the relay needs, embedded in the binary,
// and applies it with goose: the outbox table and its partial index (the
// seed article's schema), the relay's bookkeeping tables, the dead-letter
// view, the publication, and optionally a least-privilege relay role.
//
// The SQL is written once as templates; the outbox table and publication
// names are filled in, quoted, before goose sees them. Every statement is
// idempotent, so applying the migrations to a database that already has
// the seed's table adopts it as it is. Each outbox table keeps its own
// version history, in <schema>.<table>_migrations.
package migrations

import (
	"bytes"
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"strings"
	"testing/fstest"
	"text/template"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/outbox-relay/outbox-relay/contract"
)

//go:embed sql/*.sql
var templates embed.FS

// Names are the names the SQL is rendered with.
type Names struct {
	Table       contract.Table
	Publication string
}

// DeadLetterView returns the name of the dead-letter view: for the seed's
// outbox_events table it is the seed's outbox_dead_letters.
func (n Names) DeadLetterView() string {
	return strings.TrimSuffix(n.Table.Name, "_events") + "_dead_letters"
}

func (n Names) versionTable() string { return n.Table.Schema + "." + n.Table.Name + "_migrations" }

func (n Names) values() map[string]string {
	quote := func(parts ...string) string { return pgx.Identifier(parts).Sanitize() }
	return map[string]string{
		"Table":                 n.Table.Quoted(),
		"Schema":                quote(n.Table.Schema),
		"SchemaLiteral":         literal(n.Table.Schema),
		"TableLiteral":          literal(n.Table.Name),
		"QualifiedLiteral":      literal(n.Table.Quoted()),
		"UnprocessedIndex":      quote("idx_" + strings.TrimSuffix(n.Table.Name, "_events") + "_unprocessed"),
		"DeadLetterView":        quote(n.Table.Schema, n.DeadLetterView()),
		"Publication":           quote(n.Publication),
		"PublicationLiteral":    literal(n.Publication),
		"SeqSequence":           n.seqSequence(),
		"PendingIndexQualified": n.PendingIndex(),
	}
}

// literal quotes s as an SQL string literal.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// Render returns the migrations with names filled in.
func Render(n Names) (fs.FS, error) {
	out := fstest.MapFS{}
	entries, err := fs.ReadDir(templates, "sql")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		text, err := fs.ReadFile(templates, "sql/"+e.Name())
		if err != nil {
			return nil, err
		}
		t, err := template.New(e.Name()).Option("missingkey=error").Parse(string(text))
		if err != nil {
			return nil, fmt.Errorf("parse migration %s: %w", e.Name(), err)
		}
		var b bytes.Buffer
		if err := t.Execute(&b, n.values()); err != nil {
			return nil, fmt.Errorf("render migration %s: %w", e.Name(), err)
		}
		out[e.Name()] = &fstest.MapFile{Data: b.Bytes()}
	}
	return out, nil
}

// Apply applies the migrations not yet applied and returns their names.
// Concurrent runs are serialized by a Postgres advisory lock.
func Apply(ctx context.Context, conn *pgx.ConnConfig, n Names) ([]string, error) {
	db := stdlib.OpenDB(*conn)
	defer db.Close()
	p, err := provider(db, n)
	if err != nil {
		return nil, err
	}
	results, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("apply migrations for %s: %w", n.Table, err)
	}
	var applied []string
	for _, r := range results {
		applied = append(applied, r.Source.Path)
	}
	return applied, nil
}

func provider(db *sql.DB, n Names) (*goose.Provider, error) {
	fsys, err := Render(n)
	if err != nil {
		return nil, err
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, err
	}
	return goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithTableName(n.versionTable()),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	)
}

// GrantRole creates role (LOGIN REPLICATION, no password) unless it exists,
// and grants it what the relay needs and nothing more: connecting,
// reading the outbox table (initial publish, verify), and keeping its own
// records. Streaming itself needs only REPLICATION.
func GrantRole(ctx context.Context, conn *pgx.ConnConfig, n Names, role string) error {
	return grantRole(ctx, conn, n, role, false)
}

// GrantPollRole is GrantRole for the polling relay (run --source poll):
// the role is created without REPLICATION, which polling does not need
// and which databases without logical replication often refuse to give,
// and it may also set the bookkeeping columns of the outbox table (not
// its events) and keep the claims. Those UPDATEs are why the WAL relay's
// role does not get them.
func GrantPollRole(ctx context.Context, conn *pgx.ConnConfig, n Names, role string) error {
	return grantRole(ctx, conn, n, role, true)
}

func grantRole(ctx context.Context, conn *pgx.ConnConfig, n Names, role string, poll bool) error {
	c, err := pgx.ConnectConfig(ctx, conn)
	if err != nil {
		return fmt.Errorf("connect to grant role %q: %w", role, err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	r := pgx.Identifier{role}.Sanitize()
	schema := pgx.Identifier{n.Table.Schema}.Sanitize()
	attrs := "LOGIN REPLICATION"
	if poll {
		attrs = "LOGIN"
	}
	stmts := []string{
		fmt.Sprintf(`DO $$ BEGIN
			IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %s) THEN CREATE ROLE %s %s; END IF;
			EXECUTE format('GRANT CONNECT ON DATABASE %%I TO %%I', current_database(), %s);
		END $$`, literal(role), r, attrs, literal(role)),
		fmt.Sprintf(`GRANT USAGE ON SCHEMA %s TO %s`, schema, r),
		fmt.Sprintf(`GRANT SELECT ON %s TO %s`, n.Table.Quoted(), r),
		fmt.Sprintf(`GRANT SELECT, INSERT, UPDATE, DELETE ON %s.outbox_relay_slots TO %s`, schema, r),
		fmt.Sprintf(`GRANT SELECT, INSERT, UPDATE ON %s.outbox_relay_dead_letters TO %s`, schema, r),
		fmt.Sprintf(`GRANT SELECT ON %s TO %s`, pgx.Identifier{n.Table.Schema, n.DeadLetterView()}.Sanitize(), r),
	}
	if !poll {
		// A relay reading from a standby asks the primary for a
		// running-transactions record while it creates its slot there
		// (docs/standby.md). The function, Postgres 16+, is revoked from
		// PUBLIC; all it does is write that small WAL record, which the
		// server writes every 15 s anyway. Granted only by a role that
		// may (a superuser): the relay warns otherwise, saying what to
		// grant.
		stmts = append(stmts, fmt.Sprintf(`DO $$ BEGIN
			IF current_setting('server_version_num')::int >= 160000 THEN
				IF has_function_privilege('pg_catalog.pg_log_standby_snapshot()', 'EXECUTE WITH GRANT OPTION') THEN
					GRANT EXECUTE ON FUNCTION pg_catalog.pg_log_standby_snapshot() TO %s;
				END IF;
			END IF;
		END $$`, r))
	}
	if poll {
		stmts = append(stmts,
			fmt.Sprintf(`GRANT UPDATE (processed_at, attempts, retry_after, last_error) ON %s TO %s`, n.Table.Quoted(), r),
			fmt.Sprintf(`GRANT SELECT, INSERT, UPDATE, DELETE ON %s.outbox_relay_poll_claims TO %s`, schema, r))
	}
	for _, s := range stmts {
		if _, err := c.Exec(ctx, s); err != nil {
			return fmt.Errorf("grant role %q: %w", role, err)
		}
	}
	return nil
}
