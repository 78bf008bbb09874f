package consumer

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/outbox-relay/outbox-relay/contract"
)

// backend is the database side of a Consumer, one per driver: pgx (New,
// pgx.go) and database/sql (NewSQL, sql.go). Both run the store's SQL; the
// logic around it (claim, handler, commit, then ack) is process's alone.
type backend interface {
	// begin starts the transaction of one delivery.
	begin(ctx context.Context) (txn, error)
	// exec runs one statement in a transaction of its own.
	exec(ctx context.Context, sql string, args ...any) error
	// tables runs store.checkSQL in a read-only transaction.
	tables(ctx context.Context, sql string, args ...any) (tableFacts, error)
}

// txn is one delivery's transaction.
type txn interface {
	// claim runs store.claimSQL: false when it returned no row.
	claim(ctx context.Context, sql string, args ...any) (bool, error)
	// handle runs the user's handler in the transaction.
	handle(ctx context.Context, m *Message) error
	commit(ctx context.Context) error
	// rollback is a no-op after commit.
	rollback(ctx context.Context) error
}

// tableFacts is what store.checkSQL reads: whether the tables exist, and
// the unique keys of processed_events as a JSON array of column lists.
type tableFacts struct {
	hasProcessed, hasFailed bool
	keysJSON                string
}

// store holds the SQL on the two tables.
type store struct {
	processed, failed contract.Table
	claimSQL          string
	failSQL           string
}

func newStore(schema string) (store, error) {
	p, err := contract.ParseTable(schema + ".processed_events")
	if err != nil {
		return store{}, fmt.Errorf("schema %q: want lower-case letters, digits and underscores", schema)
	}
	f := contract.Table{Schema: p.Schema, Name: "failed_events"}
	return store{
		processed: p, failed: f,
		claimSQL: `INSERT INTO ` + p.Quoted() + ` (consumer, event_id) VALUES ($1, $2)
ON CONFLICT (consumer, event_id) DO NOTHING RETURNING true`,
		failSQL: `INSERT INTO ` + f.Quoted() + ` (consumer, event_id, stream, stream_seq, subject, deliveries, error, headers, payload)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8::text::jsonb, $9)
ON CONFLICT (consumer, event_id) DO UPDATE SET stream = EXCLUDED.stream, stream_seq = EXCLUDED.stream_seq,
    subject = EXCLUDED.subject, deliveries = EXCLUDED.deliveries, error = EXCLUDED.error,
    headers = EXCLUDED.headers, payload = EXCLUDED.payload, failed_at = NOW()`,
	}, nil
}

// claim inserts (consumer, id) in tx; false means the consumer has
// processed the event already (or another delivery of it committed
// while this one waited for its lock).
func (s store) claim(ctx context.Context, tx txn, consumer, id string) (bool, error) {
	claimed, err := tx.claim(ctx, s.claimSQL, consumer, id)
	if err != nil {
		return false, fmt.Errorf("insert into %s: %w", s.processed, err)
	}
	return claimed, nil
}

// recordFailure writes m to failed_events in a transaction of its own.
// The arguments are plain Go values (text, int64, []byte for bytea), which
// every database/sql driver for Postgres takes as pgx does.
func (s store) recordFailure(ctx context.Context, db backend, consumer string, m *Message, cause error) error {
	headers, err := json.Marshal(textHeaders(m.Header))
	if err != nil {
		return err
	}
	payload := m.Data
	if payload == nil {
		payload = []byte{}
	}
	err = db.exec(ctx, s.failSQL, consumer, m.recordID(), m.Stream, int64(m.StreamSeq), cleanText(m.Subject),
		int64(m.Delivered), cleanText(cause.Error()), string(headers), payload)
	if err != nil {
		return fmt.Errorf("insert into %s: %w", s.failed, err)
	}
	return nil
}

// cleanText makes s storable as Postgres text (and jsonb): valid UTF-8,
// no NUL.
func cleanText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

func textHeaders(h map[string][]string) map[string][]string {
	out := make(map[string][]string, len(h))
	for k, vs := range h {
		clean := make([]string, len(vs))
		for i, v := range vs {
			clean[i] = cleanText(v)
		}
		out[cleanText(k)] = clean
	}
	return out
}

// checkSQL reads the tables' facts. The keys come as JSON text, not a
// Postgres array, so that any database/sql driver can read them.
const checkSQL = `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL,
    COALESCE((SELECT json_agg(cols) FROM (
        SELECT array_agg(a.attname::text ORDER BY a.attname) AS cols
        FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
        WHERE i.indrelid = to_regclass($1) AND i.indisunique
        GROUP BY i.indexrelid) u), '[]')::text`

// check verifies that both tables exist and that processed_events is keyed
// by (consumer, event_id) and nothing narrower: the article's table, keyed
// by event_id alone, would make one consumer skip the events another has
// processed.
func (s store) check(ctx context.Context, db backend) error {
	facts, err := db.tables(ctx, checkSQL, s.processed.Quoted(), s.failed.Quoted())
	if err != nil {
		return fmt.Errorf("check %s: %w", s.processed, err)
	}
	var keys [][]string
	if err := json.Unmarshal([]byte(facts.keysJSON), &keys); err != nil {
		return fmt.Errorf("check %s: read its unique keys %q: %w", s.processed, facts.keysJSON, err)
	}
	howTo := "apply the migrations (outbox-relay migrate) to this database, or create the tables of migrations/sql/00005_processed_events.sql"
	switch {
	case !facts.hasProcessed:
		return fmt.Errorf("table %s does not exist: %s", s.processed, howTo)
	case !facts.hasFailed:
		return fmt.Errorf("table %s does not exist: %s", s.failed, howTo)
	case !slices.ContainsFunc(keys, func(k []string) bool { return slices.Equal(k, []string{"consumer", "event_id"}) }):
		return fmt.Errorf("table %s has no unique key on (consumer, event_id) (unique keys: %v): it is not the table of migrations/sql/00005_processed_events.sql", s.processed, keys)
	}
	for _, k := range keys {
		if !slices.Contains(k, "consumer") {
			return fmt.Errorf("table %s has a unique key on (%s) without consumer, as the seed article's single-consumer table: one consumer would skip the events another processed; key it by (consumer, event_id) as migrations/sql/00005_processed_events.sql does", s.processed, strings.Join(k, ", "))
		}
	}
	return nil
}
