package relay

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/verify"
)

// RowSource reads outbox rows with SQL, for the events the WAL cannot
// give: rows present when a slot is created, rows a gap left out of the
// stream, dead letters to retry. Events read this way have commit LSN 0.
// A RowSource of several tables reads them in one query, in one order,
// and its events carry qualified ids, as the WAL relay's do.
type RowSource struct {
	tables []rowTable
	// qualify says the events' ids are qualified by their table: the
	// source was made for several tables (Having may leave one).
	qualify bool
}

// rowTable is one table a RowSource reads, with its columns.
type rowTable struct {
	table contract.Table
	cols  map[string]string
}

func (t rowTable) has(col string) bool { _, ok := t.cols[col]; return ok }

// NewRowSource reads the columns of table (and of more tables).
func NewRowSource(ctx context.Context, pool *pgxpool.Pool, table contract.Table, more ...contract.Table) (*RowSource, error) {
	r := &RowSource{}
	for _, t := range append([]contract.Table{table}, more...) {
		cols, err := replication.Columns(ctx, pool, t)
		if err != nil {
			return nil, err
		}
		if len(cols) == 0 {
			return nil, fmt.Errorf("table %s does not exist", t)
		}
		r.tables = append(r.tables, rowTable{table: t, cols: cols})
	}
	r.qualify = len(r.tables) > 1
	return r, nil
}

// Having returns the source of the tables that have the column (nil when
// none has it); their events' ids stay qualified as this source's.
func (r *RowSource) Having(col string) *RowSource {
	out := &RowSource{qualify: r.qualify}
	for _, t := range r.tables {
		if t.has(col) {
			out.tables = append(out.tables, t)
		}
	}
	if len(out.tables) == 0 {
		return nil
	}
	return out
}

// Has reports whether every table has the column.
func (r *RowSource) Has(col string) bool { return len(r.Without(col)) == 0 }

// Without returns the tables that lack the column.
func (r *RowSource) Without(col string) []contract.Table {
	var out []contract.Table
	for _, t := range r.tables {
		if !t.has(col) {
			out = append(out, t.table)
		}
	}
	return out
}

// several reports whether the source reads several tables in one query.
func (r *RowSource) several() bool { return len(r.tables) > 1 }

// Each calls fn with the rows matching where (the same condition, and the
// same args, for every table), in the best order Postgres still knows:
// commit timestamps when track_commit_timestamp is on, then created_at
// (the order the seed's polling relay used), then physical order, which
// keeps a transaction's rows in insertion order (of several tables: each
// table's rows of one transaction in insertion order, the tables in the
// order given). Their WAL order is out of reach: it may predate the slot
// by years.
func (r *RowSource) Each(ctx context.Context, db verify.Querier, where string, args []any, fn func(*decode.Event) error) (int, error) {
	return r.each(ctx, db, func(rowTable) string { return where }, args, fn)
}

// EachKey is Each for the rows, of the tables that have every column
// where names, whose key is one of keys: the event's message id (its id,
// qualified by its table when the source reads several), as verify
// reports missing rows and the relay records dead letters. where may be
// empty.
func (r *RowSource) EachKey(ctx context.Context, db verify.Querier, where string, keys []string, fn func(*decode.Event) error) (int, error) {
	return r.each(ctx, db, func(t rowTable) string {
		cond := r.keyExpr(t) + " = ANY($1)"
		if where != "" {
			cond = where + " AND " + cond
		}
		return cond
	}, []any{keys}, fn)
}

// keyExpr is the SQL of a row's key in t: what EachKey compares.
func (r *RowSource) keyExpr(t rowTable) string {
	if !r.qualify {
		return "id::text"
	}
	return "'" + strings.ReplaceAll(contract.QualifiedID(t.table.String(), ""), "'", "''") + "' || id::text"
}

func (r *RowSource) each(ctx context.Context, db verify.Querier, where func(rowTable) string, args []any, fn func(*decode.Event) error) (int, error) {
	commitOrder, err := commitTimestamps(ctx, db)
	if err != nil {
		return 0, err
	}
	rows, err := db.Query(ctx, r.query(where, commitOrder), args...)
	if err != nil {
		return 0, fmt.Errorf("read rows of %s: %w", r.names(), err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		v := rows.RawValues()
		t := r.tables[0]
		if r.several() {
			i, err := strconv.Atoi(string(v[7]))
			if err != nil || i < 0 || i >= len(r.tables) {
				return n, fmt.Errorf("read rows of %s: table index %q", r.names(), v[7])
			}
			t = r.tables[i]
		}
		ev := decode.NewEvent(decode.Fields{
			ID: v[0], AggregateType: v[1], AggregateID: v[2], EventType: v[3], Payload: v[4], CreatedAt: v[5], Headers: v[6],
			PayloadIsBytea: t.cols[contract.ColumnPayload] == "bytea",
			HasCreatedAt:   t.has(contract.ColumnCreatedAt),
		}, decode.Position{Index: uint32(n)})
		ev.Table, ev.QualifyID = t.table.String(), r.qualify
		if err := fn(&ev); err != nil {
			return n, err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("read rows of %s: %w", r.names(), err)
	}
	return n, nil
}

// commitTimestamps reports whether Postgres keeps commit timestamps, by
// which rows are then ordered first.
func commitTimestamps(ctx context.Context, db verify.Querier) (bool, error) {
	var commitTS string
	rows, err := db.Query(ctx, `SELECT current_setting('track_commit_timestamp')`)
	if err == nil {
		for rows.Next() {
			_ = rows.Scan(&commitTS)
		}
		err = rows.Err()
	}
	if err != nil {
		return false, fmt.Errorf("read track_commit_timestamp: %w", err)
	}
	return commitTS == "on", nil
}

// query returns the SELECT of the rows where chooses. One table is read
// as relays of one table always read it; several in one UNION ALL,
// ordered across them, with each row's table index last (as text, like
// every column: the rows are read raw).
func (r *RowSource) query(where func(rowTable) string, commitOrder bool) string {
	if !r.several() {
		t := r.tables[0]
		cond := where(t)
		order := "ctid"
		if t.has(contract.ColumnCreatedAt) {
			order = "created_at, ctid"
		}
		if commitOrder {
			order = "pg_xact_commit_timestamp(xmin) NULLS FIRST, " + order
		}
		return `SELECT ` + r.columns(t, false) + ` FROM ` + t.table.Quoted() + ` WHERE ` + cond + ` ORDER BY ` + order
	}
	commitTS := "NULL::timestamptz"
	if commitOrder {
		commitTS = "pg_xact_commit_timestamp(xmin)"
	}
	parts := make([]string, len(r.tables))
	for i, t := range r.tables {
		created := "NULL::timestamptz"
		if t.has(contract.ColumnCreatedAt) {
			created = "created_at::timestamptz"
		}
		parts[i] = fmt.Sprintf(`SELECT %s, %d AS table_index, %s AS commit_ts, %s AS created, ctid AS row_ctid FROM %s WHERE %s`,
			r.columns(t, true), i, commitTS, created, t.table.Quoted(), where(t))
	}
	order := "created, table_index, row_ctid"
	if commitOrder {
		order = "commit_ts NULLS FIRST, " + order
	}
	return `SELECT id, aggregate_type, aggregate_id, event_type, payload, created_at, headers, table_index::text AS table_ix FROM (` +
		strings.Join(parts, " UNION ALL ") + `) AS rows ORDER BY ` + order
}

// columns is the select list of an event's columns in t, as text; named
// for a UNION's outer query to read, or not (a name such as created_at
// would then be what ORDER BY created_at sorts by: its text).
func (r *RowSource) columns(t rowTable, named bool) string {
	created, headers := "NULL::text", "NULL::text"
	if t.has(contract.ColumnCreatedAt) {
		created = "created_at::text"
	}
	if _, ok := decode.HeadersColumnTypes[t.cols[contract.ColumnHeaders]]; ok {
		headers = "headers::text"
	}
	if !named {
		return `id::text, aggregate_type::text, aggregate_id::text, event_type::text, payload::text, ` + created + `, ` + headers
	}
	return `id::text AS id, aggregate_type::text AS aggregate_type, aggregate_id::text AS aggregate_id, event_type::text AS event_type, payload::text AS payload, ` +
		created + ` AS created_at, ` + headers + ` AS headers`
}

// names names the tables, for errors.
func (r *RowSource) names() string {
	ts := make([]contract.Table, len(r.tables))
	for i, t := range r.tables {
		ts[i] = t.table
	}
	return contract.JoinTables(ts)
}

// Oldest returns how many rows match where (the same condition, and the
// same args, for every table) and the created_at of the oldest (zero when
// a table has no created_at column or no row matches): how far back what
// the stream holds of them can be.
func (r *RowSource) Oldest(ctx context.Context, db verify.Querier, where string, args []any) (time.Time, int, error) {
	oldest := "NULL::timestamptz"
	if r.Has(contract.ColumnCreatedAt) {
		oldest = "min(created_at)"
	}
	parts := make([]string, len(r.tables))
	for i, t := range r.tables {
		parts[i] = `SELECT ` + oldest + ` AS oldest, count(*) AS n FROM ` + t.table.Quoted() + ` WHERE ` + where
	}
	query := parts[0]
	if r.several() {
		query = `SELECT min(oldest), coalesce(sum(n), 0)::bigint FROM (` + strings.Join(parts, " UNION ALL ") + `) AS counts`
	}
	rows, err := db.Query(ctx, query, args...)
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("count the rows of %s: %w", r.names(), err)
	}
	var at *time.Time
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&at, &n}, func() error { return nil }); err != nil {
		return time.Time{}, 0, fmt.Errorf("count the rows of %s: %w", r.names(), err)
	}
	if at == nil {
		return time.Time{}, n, nil
	}
	return *at, n, nil
}

// warnForeignHeaders says so when the table has a headers column the relay
// does not read (not json or jsonb): events then carry no headers of their
// own, and outbox.Write cannot write any.
func warnForeignHeaders(ctx context.Context, pool *pgxpool.Pool, table contract.Table, log zerolog.Logger) {
	cols, err := replication.Columns(ctx, pool, table)
	if err != nil {
		return // Check read them a moment ago; nothing to add
	}
	if typ, ok := cols[contract.ColumnHeaders]; ok {
		if _, ours := decode.HeadersColumnTypes[typ]; !ours {
			log.Warn().Str("table", table.String()).Str("type", typ).
				Msg("the table's headers column is not json or jsonb: the relay does not read it, and events carry no headers of their own")
		}
	}
}
