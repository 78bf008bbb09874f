-- What the polling relay (`run --source poll`) keeps on each row, after
-- "Transactional outbox pattern in Go with PostgreSQL": when a rejected
-- row may be tried again (retry_after, the article's exponential backoff),
-- why it was rejected last (last_error), and seq, the order rows were
-- inserted in. The table's id is random and created_at is the inserting
-- transaction's start, so neither orders the rows of one aggregate; seq,
-- taken when the row is inserted, does. Rows inserted before seq had its
-- default keep it NULL and come first, in created_at order.
--
-- Adding nullable columns without a default rewrites nothing and costs an
-- insert nothing. What would cost every insert -- seq's default (nextval)
-- and the polling relay's partial index, which in WAL mode, where
-- processed_at stays NULL, would cover the whole table -- is added only
-- for polling, by `outbox-relay migrate --source poll` (migrations/poll.go,
-- with CREATE INDEX CONCURRENTLY, which goose's transaction cannot run).
-- The WAL relay reads its columns by name and its publication publishes
-- inserts only, so the polling relay's updates never reach it.
-- +goose Up
ALTER TABLE {{.Table}}
    ADD COLUMN IF NOT EXISTS seq         BIGINT,
    ADD COLUMN IF NOT EXISTS retry_after TIMESTAMPTZ,
    ADD COLUMN IF NOT EXISTS last_error  TEXT;

-- The rows a polling batch is publishing, written (and committed) before
-- it publishes them and deleted by the batch's own commit. A claim that
-- outlives its batch means the batch ended without committing (the relay
-- was killed, the commit failed) after some of its rows may have reached
-- the stream: the next batch to take them reads the stream first and does
-- not publish again what it holds, however long after.
CREATE TABLE IF NOT EXISTS {{.Schema}}.outbox_relay_poll_claims (
    claim_id   BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_ids  TEXT[]      NOT NULL,
    claimed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- +goose Down
-- Also what `migrate --source poll` added.
DROP TABLE IF EXISTS {{.Schema}}.outbox_relay_poll_claims;
DROP INDEX IF EXISTS {{.PendingIndexQualified}};
ALTER TABLE {{.Table}}
    DROP COLUMN IF EXISTS last_error,
    DROP COLUMN IF EXISTS retry_after,
    DROP COLUMN IF EXISTS seq;
DROP SEQUENCE IF EXISTS {{.SeqSequence}};
