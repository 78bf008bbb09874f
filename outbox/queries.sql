-- Queries for sqlc users writing and reading the outbox table, as in the
-- seed article's "sqlc integration". Point sqlc's schema at the article's
-- CREATE TABLE outbox_events (the one `outbox-relay migrate` applies, see
-- migrations/sql/00001_outbox_table.sql). The consumer's queries are in
-- consumer/queries.sql.
--
-- sqlc generates no validation: a payload that is not JSON, holds \u0000 or
-- is larger than the stream's max_payload fails at the INSERT (aborting the
-- caller's transaction) or at the relay (a dead letter). The outbox package
-- (outbox.Write, outbox.WriteSQL) checks all of that before it sends the
-- same statements.

-- name: InsertOutboxEvent :one
-- One event; returns its id, the message's Nats-Msg-Id.
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
VALUES (@aggregate_type, @aggregate_id, @event_type, @payload)
RETURNING id;

-- name: InsertOutboxEventWithHeaders :one
-- One event with headers of its own (a JSON object of header names to
-- string values, such as {"traceparent": "00-…-01"}; migration 00006 adds
-- the column). Names starting with Nats- or Outbox- are refused by the
-- relay (a dead letter); outbox.Write checks them before the INSERT.
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers)
VALUES (@aggregate_type, @aggregate_id, @event_type, @payload, @headers)
RETURNING id;

-- name: InsertOutboxEvents :many
-- Many events in one statement, from parallel arrays (payloads as JSON
-- text); the ids come back in the order of the arrays, which is the order
-- the relay publishes them in.
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
SELECT u.aggregate_type, u.aggregate_id, u.event_type, u.payload::jsonb
FROM unnest(@aggregate_types::text[], @aggregate_ids::text[], @event_types::text[], @payloads::text[])
    WITH ORDINALITY AS u(aggregate_type, aggregate_id, event_type, payload, n)
ORDER BY u.n
RETURNING id;

-- name: EmitOutboxEvent :one
-- A table-less event: one transactional logical message with the envelope
-- the relay decodes (--message-prefix 'outbox', Postgres 14+ for the
-- relay), in the caller's transaction, as outbox.Emit writes it; returns
-- its id, the message's Nats-Msg-Id. No row is written.
WITH e AS MATERIALIZED (SELECT gen_random_uuid()::text AS id)
SELECT e.id
FROM e CROSS JOIN LATERAL pg_logical_emit_message(true, 'outbox', json_build_object(
    'id', e.id, 'aggregate_type', @aggregate_type::text, 'aggregate_id', @aggregate_id::text,
    'event_type', @event_type::text, 'payload', @payload::jsonb, 'created_at', now())::text) AS m;

-- name: OutboxPendingCount :one
-- The article's pending count. With the WAL relay rows are never marked
-- processed, so this counts rows not yet removed, not events unpublished:
-- ask `outbox-relay status` for the relay's lag.
SELECT COUNT(*) FROM outbox_events WHERE processed_at IS NULL;
