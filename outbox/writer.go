package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/contract"
)

// Tx is what Write needs of a pgx transaction. pgx.Tx, *pgxpool.Tx and
// *pgx.Conn have it.
type Tx interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// SQLTx is what WriteSQL needs of a database/sql transaction. *sql.Tx and
// *sql.Conn have it. Any Postgres driver works (pgx's stdlib, lib/pq): the
// arguments are plain strings.
type SQLTx interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// DefaultMaxPayload is the default maximum message size: NATS's default
// max_payload, 1 MiB.
const DefaultMaxPayload = 1 << 20

// A Writer writes events to one outbox table. It is safe for concurrent use.
type Writer struct {
	table      contract.Table
	maxMessage int
	insertSQL  string
	// insertHeadersSQL also fills the headers column: used only when an
	// event of the call has headers, so tables without it keep working.
	insertHeadersSQL string
	prefix           string // of the messages Emit writes
	noTrace          bool   // WithoutTraceContext
}

// Option configures a Writer.
type Option func(*Writer) error

// WithTable writes to table ("schema.table" or "table" in schema public,
// lower-case letters, digits and underscores, like the relay's --table)
// instead of public.outbox_events.
func WithTable(table string) Option {
	return func(w *Writer) error {
		t, err := contract.ParseTable(table)
		if err != nil {
			return fmt.Errorf("outbox: %w", err)
		}
		w.table = t
		return nil
	}
}

// WithMaxPayload sets the largest message the relay may publish, in bytes:
// the NATS server's max_payload, or the stream's max_msg_size when that is
// smaller. An event whose payload, in the form the relay publishes it, and
// the relay's headers would not fit is refused with ErrPayloadTooLarge
// rather than reaching the stream's dead letters. The default is
// DefaultMaxPayload.
func WithMaxPayload(bytes int) Option {
	return func(w *Writer) error {
		if bytes <= headerReserve {
			return fmt.Errorf("outbox: maximum payload %d bytes: want more than %d (room for the relay's headers)", bytes, headerReserve)
		}
		w.maxMessage = bytes
		return nil
	}
}

// NewWriter returns a Writer for public.outbox_events, or the table
// WithTable names.
func NewWriter(opts ...Option) (*Writer, error) {
	w := &Writer{table: contract.DefaultTable, maxMessage: DefaultMaxPayload, prefix: contract.DefaultMessagePrefix}
	for _, o := range opts {
		if err := o(w); err != nil {
			return nil, err
		}
	}
	w.insertSQL, w.insertHeadersSQL = insertSQL(w.table), insertHeadersSQL(w.table)
	return w, nil
}

var defaultWriter, _ = NewWriter()

// Write writes events to public.outbox_events in tx with the default
// limits; see Writer.Write.
func Write(ctx context.Context, tx Tx, events ...Event) ([]string, error) {
	return defaultWriter.Write(ctx, tx, events...)
}

// WriteSQL writes events to public.outbox_events in tx with the default
// limits; see Writer.WriteSQL.
func WriteSQL(ctx context.Context, tx SQLTx, events ...Event) ([]string, error) {
	return defaultWriter.WriteSQL(ctx, tx, events...)
}

// Table returns the table w writes to.
func (w *Writer) Table() contract.Table { return w.table }

// insertSQL is one statement for any number of events: the rows come
// from four parallel text arrays, inserted in array order, so the ids come
// back in the order of the events. The payload is cast from text so that
// no driver has to know how to encode jsonb.
func insertSQL(t contract.Table) string {
	return `INSERT INTO ` + t.Quoted() + ` (aggregate_type, aggregate_id, event_type, payload)
SELECT u.aggregate_type, u.aggregate_id, u.event_type, u.payload::jsonb
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS u(aggregate_type, aggregate_id, event_type, payload, n)
ORDER BY u.n
RETURNING id::text`
}

// insertHeadersSQL is insertSQL with a fifth array for the headers column
// (an empty string for an event without headers).
func insertHeadersSQL(t contract.Table) string {
	return `INSERT INTO ` + t.Quoted() + ` (aggregate_type, aggregate_id, event_type, payload, headers)
SELECT u.aggregate_type, u.aggregate_id, u.event_type, u.payload::jsonb, NULLIF(u.headers, '')::jsonb
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS u(aggregate_type, aggregate_id, event_type, payload, headers, n)
ORDER BY u.n
RETURNING id::text`
}

// Write inserts events into the outbox table in tx, with one statement,
// and returns their ids in the order of events. It checks every event
// first: if one is invalid, nothing is sent and tx stays usable. Writing
// no events does nothing.
func (w *Writer) Write(ctx context.Context, tx Tx, events ...Event) ([]string, error) {
	cols, err := w.columns(ctx, events)
	if err != nil || cols == nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, w.statement(cols), cols.args(cols.width(), nil)...)
	if err != nil {
		return nil, w.insertErr(err)
	}
	defer rows.Close()
	ids, err := scanIDs(rows, len(events), 1)
	if err != nil {
		return nil, w.insertErr(err)
	}
	return w.checkIDs(ids, len(events))
}

// WriteSQL is Write for database/sql. The arrays travel as Postgres array
// literals, which every driver passes as text.
func (w *Writer) WriteSQL(ctx context.Context, tx SQLTx, events ...Event) ([]string, error) {
	cols, err := w.columns(ctx, events)
	if err != nil || cols == nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, w.statement(cols), cols.args(cols.width(), arrayLiteral)...)
	if err != nil {
		return nil, w.insertErr(err)
	}
	defer rows.Close()
	ids, err := scanIDs(rows, len(events), 1)
	if err == nil {
		err = rows.Close()
	}
	if err != nil {
		return nil, w.insertErr(err)
	}
	return w.checkIDs(ids, len(events))
}

// rowScanner is what pgx.Rows and *sql.Rows have in common.
type rowScanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// scanIDs reads the ids a statement returns in its first column, of width
// columns (the others, such as Emit's message LSN, are read and dropped).
func scanIDs(rows rowScanner, want, width int) ([]string, error) {
	ids := make([]string, 0, want)
	var id string
	dest := make([]any, width)
	dest[0] = &id
	for i := 1; i < width; i++ {
		dest[i] = new(any)
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// columnArrays are the statement's parallel arrays: aggregate types, ids,
// event types, payloads and, when some event has them, headers.
type columnArrays struct {
	values  [5][]string
	headers bool
}

// columns validates events and returns the statement's arrays, or nil for
// no events. Events get ctx's trace context (see trace.go).
func (w *Writer) columns(ctx context.Context, events []Event) (*columnArrays, error) {
	if len(events) == 0 {
		return nil, nil
	}
	trace := w.traceHeaders(ctx)
	cols := &columnArrays{}
	for i := range cols.values {
		cols.values[i] = make([]string, len(events))
	}
	for i, ev := range events {
		ev.Headers = withTrace(ev.Headers, trace)
		r, err := prepare(i, ev, w.maxMessage)
		if err != nil {
			return nil, err
		}
		v := &cols.values
		v[0][i], v[1][i], v[2][i], v[3][i], v[4][i] = r.aggregateType, r.aggregateID, r.eventType, r.payload, r.headers
		cols.headers = cols.headers || r.headers != ""
	}
	return cols, nil
}

// width is how many arrays the insert binds: the headers only when some
// event has them, so that tables without the column keep working.
func (c *columnArrays) width() int {
	if c.headers {
		return 5
	}
	return 4
}

// args are the first n arrays as statement arguments, each passed through
// as (database/sql takes Postgres array literals) when given.
func (c *columnArrays) args(n int, as func([]string) string) []any {
	args := make([]any, n)
	for i := range args {
		if as != nil {
			args[i] = as(c.values[i])
		} else {
			args[i] = c.values[i]
		}
	}
	return args
}

func (w *Writer) statement(cols *columnArrays) string {
	if cols.headers {
		return w.insertHeadersSQL
	}
	return w.insertSQL
}

func (w *Writer) insertErr(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42703" && strings.Contains(pgErr.Message, `"headers"`) {
		return fmt.Errorf("insert outbox events into %s: the table has no headers column for the events' headers (run `outbox-relay migrate`, migration 00006, or write events without Headers; the caller's trace context is one: outbox.WithoutTraceContext): %w", w.table, err)
	}
	return fmt.Errorf("insert outbox events into %s: %w", w.table, err)
}

func (w *Writer) checkIDs(ids []string, want int) ([]string, error) {
	if len(ids) != want {
		return nil, fmt.Errorf("insert outbox events into %s: %d ids returned for %d events", w.table, len(ids), want)
	}
	return ids, nil
}

// arrayLiteral writes values as a Postgres text[] literal: every element
// quoted, '"' and '\' escaped with a backslash, so no value can be read as
// NULL, split or trimmed.
func arrayLiteral(values []string) string {
	n := 2
	for _, v := range values {
		n += len(v) + 3
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteByte('{')
	for i, v := range values {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for j := 0; j < len(v); j++ {
			if c := v[j]; c == '"' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(v[j])
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}
