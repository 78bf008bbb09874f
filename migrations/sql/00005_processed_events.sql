-- The idempotent consumer of "Transactional outbox pattern in Go with
-- PostgreSQL" (package consumer), next to the outbox table for services
-- that consume in the same database; a service with a database of its own
-- creates the same two tables there.
-- +goose Up

-- One row per event a consumer has handled, inserted in the handler's own
-- transaction: a redelivered event conflicts and is skipped. The article's
-- table keyed by event alone, widened to (consumer, event_id) so that
-- several consumers of one event can share the table; the id is text, as
-- any Nats-Msg-Id may be.
CREATE TABLE IF NOT EXISTS {{.Schema}}.processed_events (
    consumer     TEXT        NOT NULL,
    event_id     TEXT        NOT NULL,
    processed_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    PRIMARY KEY (consumer, event_id)
);

-- Events a consumer gave up on: terminated after its maximum deliveries or
-- a permanent error, with the last error and the message as it was, so
-- that it can be examined and replayed.
CREATE TABLE IF NOT EXISTS {{.Schema}}.failed_events (
    consumer   TEXT        NOT NULL,
    event_id   TEXT        NOT NULL,
    stream     TEXT        NOT NULL,
    stream_seq BIGINT      NOT NULL,
    subject    TEXT        NOT NULL,
    deliveries BIGINT      NOT NULL,
    error      TEXT        NOT NULL,
    headers    JSONB       NOT NULL,
    payload    BYTEA       NOT NULL,
    failed_at  TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    PRIMARY KEY (consumer, event_id)
);

-- +goose Down
DROP TABLE IF EXISTS {{.Schema}}.failed_events;
DROP TABLE IF EXISTS {{.Schema}}.processed_events;
