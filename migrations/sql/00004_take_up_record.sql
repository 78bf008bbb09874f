-- What a relay needs to redo an interrupted take-up exactly: the kind of
-- publish that was running when the slot was created (the rows present then,
-- or a repair of everything the stream lacks, with its lower bound), and the
-- identity of the publication the slot decodes through, so that a change
-- made while the relay was stopped is noticed.
-- +goose Up
ALTER TABLE {{.Schema}}.outbox_relay_slots
    ADD COLUMN IF NOT EXISTS bootstrap_kind TEXT NOT NULL DEFAULT 'initial',
    ADD COLUMN IF NOT EXISTS repair_since   TIMESTAMPTZ,
    ADD COLUMN IF NOT EXISTS publication    TEXT;

-- +goose Down
ALTER TABLE {{.Schema}}.outbox_relay_slots
    DROP COLUMN IF EXISTS publication,
    DROP COLUMN IF EXISTS repair_since,
    DROP COLUMN IF EXISTS bootstrap_kind;
