package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/contract"
)

// DB is what a Consumer needs of Postgres. *pgxpool.Pool and *pgx.Conn
// have it (a *pgx.Conn only for a Consumer that runs alone on it).
type DB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
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
func (s store) claim(ctx context.Context, tx pgx.Tx, consumer, id string) (bool, error) {
	var claimed bool
	err := tx.QueryRow(ctx, s.claimSQL, consumer, id).Scan(&claimed)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("insert into %s: %w", s.processed, err)
	}
	return true, nil
}

// recordFailure writes m to failed_events in a transaction of its own.
func (s store) recordFailure(ctx context.Context, db DB, consumer string, m *Message, cause error) error {
	headers, err := json.Marshal(textHeaders(m.Header))
	if err != nil {
		return err
	}
	payload := m.Data
	if payload == nil {
		payload = []byte{}
	}
	return pgx.BeginTxFunc(ctx, db, pgx.TxOptions{}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, s.failSQL, consumer, m.recordID(), m.Stream, int64(m.StreamSeq), cleanText(m.Subject),
			int64(m.Delivered), cleanText(cause.Error()), string(headers), payload)
		if err != nil {
			return fmt.Errorf("insert into %s: %w", s.failed, err)
		}
		return nil
	})
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

// check verifies that both tables exist and that processed_events is keyed
// by (consumer, event_id) and nothing narrower: the article's table, keyed
// by event_id alone, would make one consumer skip the events another has
// processed.
func (s store) check(ctx context.Context, db DB) error {
	const q = `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL,
    COALESCE((SELECT array_agg(cols) FROM (
        SELECT array_to_string(array_agg(a.attname::text ORDER BY a.attname), ',') AS cols
        FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
        WHERE i.indrelid = to_regclass($1) AND i.indisunique
        GROUP BY i.indexrelid) u), '{}')`
	var hasProcessed, hasFailed bool
	var keys []string
	err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, q, s.processed.Quoted(), s.failed.Quoted()).Scan(&hasProcessed, &hasFailed, &keys)
	})
	if err != nil {
		return fmt.Errorf("check %s: %w", s.processed, err)
	}
	howTo := "apply the migrations (outbox-relay migrate) to this database, or create the tables of migrations/sql/00005_processed_events.sql"
	switch {
	case !hasProcessed:
		return fmt.Errorf("table %s does not exist: %s", s.processed, howTo)
	case !hasFailed:
		return fmt.Errorf("table %s does not exist: %s", s.failed, howTo)
	case !slices.Contains(keys, "consumer,event_id"):
		return fmt.Errorf("table %s has no unique key on (consumer, event_id) (unique keys: %v): it is not the table of migrations/sql/00005_processed_events.sql", s.processed, keys)
	}
	for _, k := range keys {
		if !slices.Contains(strings.Split(k, ","), "consumer") {
			return fmt.Errorf("table %s has a unique key on (%s) without consumer, as the seed article's single-consumer table: one consumer would skip the events another processed; key it by (consumer, event_id) as migrations/sql/00005_processed_events.sql does", s.processed, k)
		}
	}
	return nil
}
