package outbox

import (
	"context"
	"fmt"
	"strings"
)

// Table-less events: Emit writes events as transactional logical decoding
// messages (pg_logical_emit_message(true, prefix, envelope)) instead of
// rows. They commit or roll back with the caller's transaction exactly like
// rows, and the relay publishes them the same way, but there is no table to
// grow, index or clean up. They need Postgres 14 or later on the relay's
// side (pgoutput's messages option) and a relay whose --message-prefix is
// the Writer's prefix. The envelope is described in package decode.

// WithMessagePrefix sets the prefix of the messages Emit writes (the
// relay's --message-prefix) instead of contract.DefaultMessagePrefix.
func WithMessagePrefix(prefix string) Option {
	return func(w *Writer) error {
		if prefix == "" || strings.IndexByte(prefix, 0) >= 0 {
			return fmt.Errorf("outbox: message prefix %q: want a non-empty string without NUL", prefix)
		}
		w.prefix = prefix
		return nil
	}
}

// emitSQL emits one message per event, in the order of the arrays, and
// returns the new ids in that order. The envelope is built by Postgres:
// the payload in jsonb text form (what the relay publishes for a row),
// created_at the transaction's start like the table's default, the id a
// fresh UUID like the table's default. The CTE is materialized so that each
// event's id is generated once.
const emitSQL = `WITH e AS MATERIALIZED (
	SELECT gen_random_uuid()::text AS id, u.*
	FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[]) WITH ORDINALITY AS u(aggregate_type, aggregate_id, event_type, payload, headers, n)
)
SELECT e.id, pg_logical_emit_message(true, $1, json_build_object('id', e.id, 'aggregate_type', e.aggregate_type,
	'aggregate_id', e.aggregate_id, 'event_type', e.event_type, 'payload', e.payload::jsonb, 'created_at', now(),
	'headers', NULLIF(e.headers, '')::jsonb)::text)::text
FROM e ORDER BY e.n`

// Emit writes events as table-less events in tx, with the default prefix
// and limits; see Writer.Emit.
func Emit(ctx context.Context, tx Tx, events ...Event) ([]string, error) {
	return defaultWriter.Emit(ctx, tx, events...)
}

// EmitSQL is Emit for database/sql; see Writer.EmitSQL.
func EmitSQL(ctx context.Context, tx SQLTx, events ...Event) ([]string, error) {
	return defaultWriter.EmitSQL(ctx, tx, events...)
}

// Emit writes events as transactional logical messages in tx, with one
// statement, and returns their ids (the messages' Nats-Msg-Id) in the order
// of events, which is the order the relay publishes them in, also among
// rows written in the same transaction. Events are checked as by Write:
// if one is invalid nothing is sent and tx stays usable. The messages are
// decoded only when tx commits; outside a transaction each statement
// commits on its own, the dual write the outbox exists to avoid.
func (w *Writer) Emit(ctx context.Context, tx Tx, events ...Event) ([]string, error) {
	cols, err := w.columns(ctx, events)
	if err != nil || cols == nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, emitSQL, append([]any{w.prefix}, cols.args(5, nil)...)...)
	if err != nil {
		return nil, w.emitErr(err)
	}
	defer rows.Close()
	ids, err := scanIDs(rows, len(events), 2)
	if err != nil {
		return nil, w.emitErr(err)
	}
	return w.checkEmitted(ids, len(events))
}

// EmitSQL is Emit for database/sql.
func (w *Writer) EmitSQL(ctx context.Context, tx SQLTx, events ...Event) ([]string, error) {
	cols, err := w.columns(ctx, events)
	if err != nil || cols == nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, emitSQL, append([]any{w.prefix}, cols.args(5, arrayLiteral)...)...)
	if err != nil {
		return nil, w.emitErr(err)
	}
	defer rows.Close()
	ids, err := scanIDs(rows, len(events), 2)
	if err == nil {
		err = rows.Close()
	}
	if err != nil {
		return nil, w.emitErr(err)
	}
	return w.checkEmitted(ids, len(events))
}

// Prefix returns the prefix of the messages w emits.
func (w *Writer) Prefix() string { return w.prefix }

func (w *Writer) emitErr(err error) error {
	return fmt.Errorf("emit outbox events as logical messages with prefix %q: %w", w.prefix, err)
}

func (w *Writer) checkEmitted(ids []string, want int) ([]string, error) {
	if len(ids) != want {
		return nil, fmt.Errorf("emit outbox events with prefix %q: %d ids returned for %d events", w.prefix, len(ids), want)
	}
	return ids, nil
}
