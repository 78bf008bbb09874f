-- Where the relay stopped, exactly. The confirm limit (confirm_limit) is a
-- bound the relay may confirm up to checkpoint.Slack past without writing
-- it again (writing on every confirmation would feed itself on an idle
-- database), so a slot moved by hand by less than that goes unnoticed. At
-- a clean stop, once Postgres confirmed its final position and while its
-- session still holds the slot, the relay writes that position here: a
-- single write, which nothing confirms. Until a session streams again
-- (which clears it), the slot cannot be beyond it but by someone else's
-- hand. NULL after a stop that was not clean (a crash, SIGKILL).
-- +goose Up
ALTER TABLE {{.Schema}}.outbox_relay_slots
    ADD COLUMN IF NOT EXISTS stopped_lsn PG_LSN;

-- +goose Down
ALTER TABLE {{.Schema}}.outbox_relay_slots
    DROP COLUMN IF EXISTS stopped_lsn;
