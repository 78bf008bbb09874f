-- What `outbox-relay cleanup` needs to delete only rows whose events the
-- relay's slot has confirmed (see docs/cleanup.md).
--
-- A row's commit position is not stored in the table, and created_at is
-- when its transaction began, not when it committed: a transaction open
-- for a week inserts a week-old row that commits now. So cleanup records
-- marks: at one instant, the oldest transaction still running (xid_horizon,
-- the snapshot's xmin) and the WAL insert position read after the snapshot
-- (wal_lsn). Every transaction older than the horizon had finished then,
-- so a committed one committed before wal_lsn. Once the slot's
-- confirmed_flush_lsn reaches wal_lsn, every row inserted by a transaction
-- older than the horizon is stored in the stream.
--
-- processed_at: in WAL mode the relay never writes the table (its role
-- may only read it, and an UPDATE per event would double the table's WAL).
-- cleanup sets processed_at, in batches, on the rows it knows confirmed,
-- so that `WHERE processed_at IS NULL` (the seed's pending count and its
-- partial index) means "not known to be stored yet" as of the last
-- cleanup run. The polling source (`run --source poll`) sets it itself
-- after each PubAck. Both treat a row with processed_at set as published.
-- +goose Up
CREATE TABLE IF NOT EXISTS {{.Schema}}.outbox_relay_cleanup_marks (
    slot_name   TEXT        NOT NULL,
    wal_lsn     PG_LSN      NOT NULL,
    xid_horizon XID8        NOT NULL,
    taken_at    TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    PRIMARY KEY (slot_name, wal_lsn)
);

-- +goose Down
DROP TABLE IF EXISTS {{.Schema}}.outbox_relay_cleanup_marks;
