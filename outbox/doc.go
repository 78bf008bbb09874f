// Package outbox writes events into the outbox table inside the caller's
// own transaction, the producer half of the transactional outbox: the
// business write and its events commit together or not at all, and the
// relay publishes what committed.
//
//	tx, _ := pool.Begin(ctx)
//	defer tx.Rollback(ctx)
//	// ... INSERT INTO orders ...
//	ids, err := outbox.Write(ctx, tx, outbox.Event{
//		AggregateType: "order", AggregateID: "42", EventType: "order.created",
//		Payload: map[string]any{"total": 10},
//	})
//	// ... tx.Commit(ctx)
//
// Write takes a pgx transaction (anything with pgx's Query: pgx.Tx,
// *pgxpool.Tx, *pgx.Conn); WriteSQL takes a *sql.Tx (anything with
// QueryContext). Both send one INSERT ... SELECT FROM unnest(...) statement
// however many events there are, and return the new rows' ids (the
// messages' Nats-Msg-Id) in the order of the events, which is also the
// order the relay publishes them in.
//
// Prerequisites: the outbox table as the migrations create it
// (`outbox-relay migrate`, the seed article's schema: id uuid DEFAULT
// gen_random_uuid(), aggregate_type/aggregate_id/event_type varchar(100),
// payload jsonb), on a UTF-8 database. A Writer writes to
// public.outbox_events unless WithTable names another.
//
// Guarantees:
//
//   - Nothing is sent to Postgres unless every event is valid. A statement
//     that fails inside a Postgres transaction aborts the whole transaction,
//     business write included; so what Postgres would refuse (an empty
//     type, a value longer than 100 characters, a payload that is not JSON
//     or holds \u0000 or a lone surrogate, a number beyond numeric's range)
//     and what the relay could not publish (a message over WithMaxPayload)
//     is refused here, with an error that errors.Is matches to
//     ErrInvalidEvent, ErrInvalidPayload or ErrPayloadTooLarge and that
//     names the event's index and field. The transaction stays usable.
//   - The size check is on the payload as the relay publishes it, the jsonb
//     text form Postgres gives back (a space after every ':' and ',',
//     numbers written out in full: 1e3 becomes 1000), plus room for the
//     relay's headers. It is never smaller than the real size.
//
// Traps:
//
//   - A payload given as []byte or json.RawMessage is taken as JSON text; a
//     string is a Go value like any other and becomes a JSON string. Pass
//     json.RawMessage(s) for JSON you hold as a string.
//   - Postgres stores jsonb normalized: the published body has its keys
//     sorted by length then bytes, duplicate keys reduced to the last one,
//     and its own spacing. Consumers must parse it, never compare bytes.
//   - A span in ctx (OpenTelemetry) gives every event without a
//     traceparent of its own a traceparent and tracestate header, so the
//     relay's span and the consumer's continue the caller's trace; headers
//     need the table's headers column (migration 00006). For a table
//     without it, WithoutTraceContext keeps events header-less.
//   - Writing through a pool or connection outside a transaction works but
//     commits the events on their own: that is the dual write the outbox
//     exists to avoid.
//
// Emit and EmitSQL write the same events without a table, as transactional
// logical decoding messages (pg_logical_emit_message), which the relay
// publishes like rows on Postgres 14 and later; see emit.go and
// docs/subjects-and-messages.md for the envelope and the limits.
//
// The queries in queries.sql are the same statements for sqlc users.
package outbox
