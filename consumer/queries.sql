-- Queries for sqlc users on the idempotent consumer's tables, the seed
-- article's processed_events keyed by (consumer, event_id), and
-- failed_events. Point sqlc's schema at
-- migrations/sql/00005_processed_events.sql (the part under "+goose Up",
-- with {{.Schema}}. removed). The consumer package runs the same claim.

-- name: ClaimEvent :one
-- In the handler's transaction, before its writes: returns true when this
-- consumer had not processed the event; no row (sql.ErrNoRows /
-- pgx.ErrNoRows) when it had: skip the handler, acknowledge the message.
-- A claim by a transaction still open waits for its outcome.
INSERT INTO processed_events (consumer, event_id)
VALUES (@consumer, @event_id)
ON CONFLICT (consumer, event_id) DO NOTHING
RETURNING true AS claimed;

-- name: ListFailedEvents :many
-- What a consumer gave up on (terminated after its last delivery, a
-- permanent error, no Nats-Msg-Id), newest first.
SELECT event_id, stream, stream_seq, subject, deliveries, error, failed_at
FROM failed_events
WHERE consumer = @consumer
ORDER BY failed_at DESC
LIMIT @max_rows;

-- name: ForgetFailedEvent :exec
-- After the cause is fixed and the event republished (or handled by hand).
DELETE FROM failed_events WHERE consumer = @consumer AND event_id = @event_id;
