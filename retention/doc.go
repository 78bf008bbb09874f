// Package retention keeps the outbox table small: it deletes, in short
// batches, the rows whose events the relay's slot has confirmed stored,
// marks processed_at on the confirmed rows it keeps, and drops whole
// partitions of a partitioned outbox table once every row in them is
// confirmed. It is what `outbox-relay cleanup` runs.
//
// A row's commit position is not in the table, and created_at is the
// start of the inserting transaction, not its commit: a transaction left
// open for a week commits a week-old row now, after the slot may have
// passed rows inserted since. Age alone is therefore never enough. Each
// run records a Mark: the oldest transaction still running (the xid
// horizon) and the WAL insert position read after it. A transaction older
// than the horizon had committed (or aborted) before that position; once
// the slot's confirmed_flush_lsn reaches it, every row such a transaction
// inserted is stored in the stream. A row is confirmed when it was
// inserted by a transaction older than the horizon of a mark the slot has
// passed, or when processed_at is set (the contract shared with the
// polling source and the relay's initial publish: a row with processed_at
// set is published).
//
// Rows that are dead letters not yet retried are never deleted nor
// marked: `dlq retry` publishes them again from the table.
//
// Prerequisites: the outbox table has created_at; the slot exists, is the
// one the relay created and finished taking up (its initial publish or
// repair is done), and nobody else moved it. The role needs SELECT,
// UPDATE (processed_at) and DELETE on the table, SELECT on the relay's
// records, and INSERT, SELECT and DELETE on outbox_relay_cleanup_marks;
// dropping partitions needs the table's owner.
package retention
