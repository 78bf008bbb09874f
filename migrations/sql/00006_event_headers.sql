-- Per-event message headers (traceparent, tracestate, ...): a JSON object of
-- header names to string values that the relay publishes with the event;
-- NULL for none. A nullable column without a default changes only the
-- catalog (no table rewrite), under a brief ACCESS EXCLUSIVE lock. The
-- relay reads it when the table has it, so a table kept without it works.
-- +goose Up
ALTER TABLE {{.Table}} ADD COLUMN IF NOT EXISTS headers JSONB;

-- +goose Down
ALTER TABLE {{.Table}} DROP COLUMN IF EXISTS headers;
