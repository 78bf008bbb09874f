// Package poll reads the outbox table in batches and publishes its rows
// with the relay's sink, for databases where logical replication is not
// allowed (`outbox-relay run --source poll`): the seed article's polling
// relay done right.
//
// Each batch is one transaction. It takes a transaction-level advisory
// lock per aggregate (pg_try_advisory_xact_lock: an aggregate another
// instance is working on is skipped, not waited for), then, with a fresh
// snapshot, reads the pending rows of the aggregates it holds in insertion
// order (the seq column) FOR UPDATE, claims them (a row committed on
// another connection), publishes them through jetstream.Publisher (same
// subjects, headers, Nats-Msg-Id and metrics as the WAL relay), waits for
// their PubAcks, sets processed_at, releases the claim and commits. A
// batch that ends without its commit (a kill, a failed commit) leaves its
// rows pending and its claim behind: the next batch to take those rows
// reads the stream first and publishes only the ones it does not hold.
//
// Guarantees:
//
//   - At least once: a row is marked processed only after its PubAck.
//   - Per-aggregate order, with any number of instances: an aggregate's
//     rows are published by one transaction at a time, and never past an
//     earlier row of the aggregate that is pending, locked or waiting for a
//     retry. Rows of one aggregate are ordered by seq, which the insert
//     takes: two transactions that write one aggregate concurrently without
//     serialising on it may commit in the other order (the WAL relay would
//     follow the commits). There is no global order across aggregates.
//   - Retries: a row the stream cannot take as it is (larger than the
//     stream's max message size, a NULL column) is tried again after an
//     exponential backoff (attempts, retry_after, last_error); after
//     MaxAttempts it goes to the dead-letter subject and is recorded in
//     the dead-letter view, exactly as in WAL mode, and its aggregate flows
//     on. Outages (NATS down, Postgres restarting) are not the row's fault
//     and do not count as attempts: the sink retries them in order.
//
// Traps:
//
//   - Duplicates are still possible, and consumers deduplicate by
//     Nats-Msg-Id (package consumer): the claim check reads the stream from
//     30 s before the claim, so Postgres's and NATS's clocks must agree
//     within that; a killed relay's last messages
//     may still be on their way into the stream when it reads, and dead
//     letters kept in another stream than the events are not looked for.
//   - A batch holds its transaction open while it waits for PubAcks, also
//     through a NATS outage: keep idle_in_transaction_session_timeout off
//     or above the longest outage you ride out (a timeout rolls the batch
//     back; its claim then sends the next batch to the stream first).
//   - Never run a WAL relay and a polling relay on one table: the WAL relay
//     never sets processed_at, so the polling relay would publish again
//     everything it published. Run refuses while the WAL relay's slot
//     exists.
package poll
