package migrations

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/jackc/pgx/v5"
)

// What polling mode costs every insert is installed only for it (see
// InstallPoll): migration 00007 adds the cheap nullable columns and the
// claims table, which a WAL relay never touches and inserts never write.

// pendingIndexName is the unqualified name of the polling relay's index.
func (n Names) pendingIndexName() string {
	return "idx_" + strings.TrimSuffix(n.Table.Name, "_events") + "_pending_aggregate"
}

// PendingIndex is the polling relay's index, schema-qualified and quoted.
func (n Names) PendingIndex() string {
	return pgx.Identifier{n.Table.Schema, n.pendingIndexName()}.Sanitize()
}

// seqSequence is the sequence seq's default draws from, qualified and quoted.
func (n Names) seqSequence() string {
	return pgx.Identifier{n.Table.Schema, n.Table.Name + "_seq_seq"}.Sanitize()
}

// pendingIndexDef is the CREATE INDEX statement of the polling relay's
// index, after "CREATE INDEX [CONCURRENTLY]": an aggregate's pending rows
// in insertion order.
func (n Names) pendingIndexDef() string {
	return fmt.Sprintf(`IF NOT EXISTS %s ON %s (aggregate_type, aggregate_id, seq NULLS FIRST, created_at, id) WHERE processed_at IS NULL`,
		pgx.Identifier{n.pendingIndexName()}.Sanitize(), n.Table.Quoted())
}

// PollFix is the command that installs what polling mode needs.
const PollFix = "outbox-relay migrate --source poll"

// Querier reads one row; a pool, a connection and a transaction are one.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// PollState is what polling mode needs of the outbox table beyond the
// migrations.
type PollState struct {
	// SeqDefault says seq takes nextval of its sequence on insert.
	SeqDefault bool
	// Index says the pending index exists; Valid that it is usable (a
	// CREATE INDEX CONCURRENTLY that failed leaves it invalid).
	Index, Valid bool
}

// ReadPollState reads what InstallPoll installs. The table must exist.
func ReadPollState(ctx context.Context, db Querier, n Names) (PollState, error) {
	var s PollState
	err := db.QueryRow(ctx, `SELECT
		EXISTS (SELECT 1 FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
			WHERE d.adrelid = $1::regclass AND a.attname = 'seq'),
		i.indexrelid IS NOT NULL, coalesce(i.indisvalid, false)
	FROM (SELECT 1) one LEFT JOIN pg_index i ON i.indexrelid = to_regclass($2) AND i.indrelid = $1::regclass`,
		n.Table.Quoted(), n.PendingIndex()).Scan(&s.SeqDefault, &s.Index, &s.Valid)
	if err != nil {
		return s, fmt.Errorf("read the polling setup of %s: %w", n.Table, err)
	}
	return s, nil
}

// Problem says what is missing for polling mode and how to fix it; ""
// when nothing is.
func (s PollState) Problem(n Names) string {
	var missing []string
	if !s.SeqDefault {
		missing = append(missing, "seq has no default (nextval)")
	}
	switch {
	case !s.Index:
		missing = append(missing, "index "+n.PendingIndex()+" does not exist")
	case !s.Valid:
		missing = append(missing, "index "+n.PendingIndex()+" is invalid (a CREATE INDEX CONCURRENTLY failed)")
	}
	if len(missing) == 0 {
		return ""
	}
	return fmt.Sprintf("%s is not set up for polling: %s; run `%s` (it adds them without blocking inserts for long)",
		n.Table, strings.Join(missing, ", "), PollFix)
}

// InstallPoll sets up the outbox table for polling mode, after the
// migrations, idempotently: seq's default (nextval of its own sequence,
// the order an aggregate's rows were inserted in) and the partial index
// the polling relay reads an aggregate's pending rows through, built with
// CREATE INDEX CONCURRENTLY so that inserts go on meanwhile. A WAL-mode
// table does without both: each would cost every insert, and in WAL mode
// processed_at stays NULL, so the partial index would cover the whole
// table. An invalid index left by an earlier failed build is rebuilt.
func InstallPoll(ctx context.Context, conn *pgx.ConnConfig, n Names) error {
	c, err := pgx.ConnectConfig(ctx, conn)
	if err != nil {
		return fmt.Errorf("connect to set up %s for polling: %w", n.Table, err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	s, err := ReadPollState(ctx, c, n)
	if err != nil {
		return err
	}
	if !s.SeqDefault {
		if err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			for _, stmt := range []string{
				`CREATE SEQUENCE IF NOT EXISTS ` + n.seqSequence(),
				fmt.Sprintf(`ALTER SEQUENCE %s OWNED BY %s.seq`, n.seqSequence(), n.Table.Quoted()),
				fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN seq SET DEFAULT nextval(%s::regclass)`, n.Table.Quoted(), literal(n.seqSequence())),
			} {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return fmt.Errorf("set the default of %s.seq: %w", n.Table, err)
		}
	}
	// CONCURRENTLY cannot run in a transaction: each is its own statement.
	if s.Index && !s.Valid {
		if _, err := c.Exec(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+n.PendingIndex()); err != nil {
			return fmt.Errorf("drop the invalid index %s: %w", n.PendingIndex(), err)
		}
	}
	if !s.Index || !s.Valid {
		if _, err := c.Exec(ctx, `CREATE INDEX CONCURRENTLY `+n.pendingIndexDef()); err != nil {
			return fmt.Errorf("build the index %s (run again to retry; an invalid one left behind is rebuilt): %w", n.PendingIndex(), err)
		}
	}
	return nil
}

// PollClaimsDDL returns the CREATE TABLE statement of the polling relay's
// claims table, as migration 00007 has it, rendered with n: what to run
// when the table was dropped after the migration (migrate then finds
// nothing to do).
func PollClaimsDDL(n Names) (string, error) {
	fsys, err := Render(n)
	if err != nil {
		return "", err
	}
	text, err := fs.ReadFile(fsys, "00007_poll_columns.sql")
	if err != nil {
		return "", fmt.Errorf("read migration 00007: %w", err)
	}
	s := string(text)
	start := strings.Index(s, "CREATE TABLE IF NOT EXISTS")
	end := strings.Index(s[max(start, 0):], ");")
	if start < 0 || end < 0 {
		return "", errors.New("migration 00007 has no CREATE TABLE of the claims table")
	}
	return strings.Join(strings.Fields(s[start:start+end+2]), " "), nil
}
