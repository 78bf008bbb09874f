package relay

import (
	"context"
	"fmt"
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
type RowSource struct {
	table contract.Table
	cols  map[string]string
}

// NewRowSource reads the columns of table.
func NewRowSource(ctx context.Context, pool *pgxpool.Pool, table contract.Table) (*RowSource, error) {
	cols, err := replication.Columns(ctx, pool, table)
	if err != nil {
		return nil, err
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("table %s does not exist", table)
	}
	return &RowSource{table: table, cols: cols}, nil
}

// Has reports whether the table has the column.
func (r *RowSource) Has(col string) bool { _, ok := r.cols[col]; return ok }

// Each calls fn with the rows matching where, in the best order Postgres
// still knows: commit timestamps when track_commit_timestamp is on, then
// created_at (the order the seed's polling relay used), then physical
// order, which keeps a transaction's rows in insertion order. Their WAL
// order is out of reach: it may predate the slot by years.
func (r *RowSource) Each(ctx context.Context, db verify.Querier, where string, args []any, fn func(*decode.Event) error) (int, error) {
	created, order, headers := "NULL", "ctid", "NULL"
	if r.Has(contract.ColumnCreatedAt) {
		created, order = "created_at::text", "created_at, ctid"
	}
	if _, ok := decode.HeadersColumnTypes[r.cols[contract.ColumnHeaders]]; ok {
		headers = "headers::text"
	}
	var commitTS string
	rows, err := db.Query(ctx, `SELECT current_setting('track_commit_timestamp')`)
	if err == nil {
		for rows.Next() {
			_ = rows.Scan(&commitTS)
		}
		err = rows.Err()
	}
	if err != nil {
		return 0, fmt.Errorf("read track_commit_timestamp: %w", err)
	}
	if commitTS == "on" {
		order = "pg_xact_commit_timestamp(xmin) NULLS FIRST, " + order
	}
	rows, err = db.Query(ctx, `SELECT id::text, aggregate_type::text, aggregate_id::text, event_type::text, payload::text, `+created+`, `+headers+`
		FROM `+r.table.Quoted()+` WHERE `+where+` ORDER BY `+order, args...)
	if err != nil {
		return 0, fmt.Errorf("read rows of %s: %w", r.table, err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		v := rows.RawValues()
		ev := decode.NewEvent(decode.Fields{
			ID: v[0], AggregateType: v[1], AggregateID: v[2], EventType: v[3], Payload: v[4], CreatedAt: v[5], Headers: v[6],
			PayloadIsBytea: r.cols[contract.ColumnPayload] == "bytea",
			HasCreatedAt:   r.Has(contract.ColumnCreatedAt),
		}, decode.Position{Index: uint32(n)})
		if err := fn(&ev); err != nil {
			return n, err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("read rows of %s: %w", r.table, err)
	}
	return n, nil
}

// Oldest returns how many rows match where and the created_at of the
// oldest (zero when the table has no created_at column or no row
// matches): how far back what the stream holds of them can be.
func (r *RowSource) Oldest(ctx context.Context, db verify.Querier, where string, args []any) (time.Time, int, error) {
	oldest := "NULL::timestamptz"
	if r.Has(contract.ColumnCreatedAt) {
		oldest = "min(created_at)"
	}
	rows, err := db.Query(ctx, `SELECT `+oldest+`, count(*) FROM `+r.table.Quoted()+` WHERE `+where, args...)
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("count the rows of %s: %w", r.table, err)
	}
	var at *time.Time
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&at, &n}, func() error { return nil }); err != nil {
		return time.Time{}, 0, fmt.Errorf("count the rows of %s: %w", r.table, err)
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
