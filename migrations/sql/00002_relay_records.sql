-- The relay's own bookkeeping, next to the outbox table.
-- +goose Up

-- One row per replication slot the relay created: lets it tell its own slot
-- from one dropped and recreated under the same name.
CREATE TABLE IF NOT EXISTS {{.Schema}}.outbox_relay_slots (
    slot_name       TEXT        PRIMARY KEY,
    created_lsn     PG_LSN      NOT NULL,
    confirm_limit   PG_LSN      NOT NULL,
    bootstrapped_at TIMESTAMPTZ,
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT NOW()
);

-- Events the relay could never publish as they are (sent to the
-- dead-letter subject instead), with the reason.
CREATE TABLE IF NOT EXISTS {{.Schema}}.outbox_relay_dead_letters (
    event_id         TEXT        PRIMARY KEY,
    reason           TEXT        NOT NULL,
    commit_lsn       PG_LSN,
    dead_lettered_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    retried_at       TIMESTAMPTZ
);

-- The outbox rows that are dead letters and have not been retried.
CREATE OR REPLACE VIEW {{.DeadLetterView}} AS
SELECT e.*, d.reason AS dead_letter_reason, d.dead_lettered_at
FROM {{.Table}} e
JOIN {{.Schema}}.outbox_relay_dead_letters d ON d.event_id = e.id::text
WHERE d.retried_at IS NULL
ORDER BY d.dead_lettered_at;

-- +goose Down
DROP VIEW IF EXISTS {{.DeadLetterView}};
DROP TABLE IF EXISTS {{.Schema}}.outbox_relay_dead_letters;
DROP TABLE IF EXISTS {{.Schema}}.outbox_relay_slots;
