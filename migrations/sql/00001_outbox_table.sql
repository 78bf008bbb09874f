-- The outbox table of "Transactional outbox pattern in Go with PostgreSQL":
-- the business write and the event row commit in one transaction.
-- +goose Up
CREATE TABLE IF NOT EXISTS {{.Table}} (
    id             UUID         PRIMARY KEY DEFAULT gen_random_uuid(),
    aggregate_type VARCHAR(100) NOT NULL,
    aggregate_id   VARCHAR(100) NOT NULL,
    event_type     VARCHAR(100) NOT NULL,
    payload        JSONB        NOT NULL,
    attempts       INT          NOT NULL DEFAULT 0,
    created_at     TIMESTAMPTZ  NOT NULL DEFAULT NOW(),
    processed_at   TIMESTAMPTZ
);

-- Partial index: only unprocessed rows, so it stays small.
CREATE INDEX IF NOT EXISTS {{.UnprocessedIndex}}
    ON {{.Table}} (created_at)
    WHERE processed_at IS NULL;

-- +goose Down
DROP TABLE IF EXISTS {{.Table}};
