-- The outbox table each recorded slot serves. What the stream holds is
-- decided by the events (their system, table and id), not by the slot's
-- name; the table recorded with each slot lets a relay refuse to start a
-- second slot on a table another relay streams, and lets doctor, status
-- and the relay's metrics name the slots a relay recorded and no relay
-- uses any more (they keep WAL).
-- +goose Up
ALTER TABLE {{.Schema}}.outbox_relay_slots
    ADD COLUMN IF NOT EXISTS outbox_table TEXT;

-- +goose Down
ALTER TABLE {{.Schema}}.outbox_relay_slots
    DROP COLUMN IF EXISTS outbox_table;
