// Package sink publishes outbox events to a NATS JetStream stream, in
// order, and says exactly how far the stream holds them.
//
// A Publisher takes events in WAL order (Offer, or Publish that waits for
// room) and gives each a sequence number; AckedThrough is the newest one
// that, with every earlier one, JetStream has stored. That is the only
// progress safe to confirm to Postgres: confirming what was merely offered
// loses events on a crash. EnsureStream creates or checks the stream,
// Template renders subjects from row values, and ForEach, ReadTail and
// LastEvent read back what the stream holds.
//
// Guarantees:
//
//   - Order. Messages leave in sequence order, and a later message never
//     overtakes an earlier one that still has to be sent: after a failure
//     (an error reply, a PubAck later than Config.AckTimeout, a dropped
//     connection) the Publisher lets everything in flight settle, then
//     republishes the first unacknowledged event alone until it is stored,
//     then the rest.
//   - At least once. Each message carries the event id as Nats-Msg-Id, so
//     JetStream drops a republished copy it already stored within the
//     stream's duplicate window (DefaultDuplicateWindow for streams
//     EnsureStream creates). With Config.Stream set, recovery first looks in
//     the stream and does not republish what it already holds, whatever the
//     window.
//   - A bounded window. At most Config.Window messages, and
//     Config.WindowBytes of payload, await a PubAck at once; Offer then
//     returns false and Room signals when there is room again. One message
//     larger than WindowBytes still goes, alone.
//   - Dead letters. An event that can never be published as it is (a
//     Problem found by the decoder, a message or header block larger than
//     the stream accepts, a refusal Permanent reports) goes to
//     Config.DeadLetterSubject instead, with the reason and the original
//     subject in headers and contract.DeadLetterMsgID of the event's id as
//     its Nats-Msg-Id (of its position for an id a Nats-Msg-Id cannot
//     carry, made unique in the stream for an event read from the table:
//     Publisher.deadLetterID), the row's id in Outbox-Event-Id. It settles
//     like any other message, so the events after it flow on; with
//     Config.RecordDeadLetter set it settles only once recorded.
//   - Whole transactions, with Config.Atomic. The events of a transaction
//     (those offered before an EndBatch, up to Config.AtomicLimit) are
//     stored all or none, in one JetStream atomic batch (atomic.go); a
//     batch may hold several whole transactions. Larger ones, and those
//     with a dead letter, go out as ordinary messages marked
//     contract.HeaderAtomicFallback. A batch's commit PubAck settles all
//     its events; any failure fails them all.
//   - Fast ingest. With Config.FastIngest auto, on nats-server 2.14+ and a
//     stream with allow_batched, events behind a backlog go out in
//     fast-ingest batches (fastingest.go): a flow ack or a batch's commit
//     acknowledges every event of the batch up to the one it names, and
//     anything unclear (a gap, an error, a lost ack, a reconnect, a batch
//     the server abandoned) is a failure like any other. A batch starts
//     only once the one before is acknowledged through its end.
//   - No room is never a dead letter. A refusal for want of room (a stream
//     limit with discard new, the account's JetStream quota, a server's
//     storage) or a clustered stream without a quorum holds the event and
//     everything after it until there is room; recovery reads the stream
//     to name the limit and the nats command that frees it (Blocked, in the
//     log and Metrics.Blocked). Without a quorum nothing is sent again: a
//     leader that lost it may commit every copy it was sent once its
//     servers return.
//
// Traps:
//
//   - At least once means consumers can still see a copy: a republish after
//     the duplicate window when the stream could not be read (or
//     Config.Stream is unset) is stored twice. Deduplicate on Nats-Msg-Id
//     downstream.
//   - With fast ingest JetStream drops a copy it holds within the window
//     without saying so: Metrics.Duplicates does not count it.
//   - Give the Publisher a connection made with nats.ReconnectBufSize(-1).
//     A message the client buffered during a reconnect would reach the
//     stream ahead of the earlier ones recovery republishes.
//   - Run must be running: it expires overdue PubAcks, notices dropped
//     connections and drives recovery. Without it an outage never ends.
//   - Offer, Room and AckedThrough belong to one goroutine (the replication
//     side); Run to another; PubAcks arrive on the connection's own.
//   - Row values become subject tokens through EscapeToken: a value with
//     '.', '*', '>', whitespace or non-ASCII bytes is percent-encoded
//     ("order.created" becomes "order%2Ecreated"), so a consumer filtering on
//     a value must escape it the same way.
//   - EnsureStream never changes an existing stream. It refuses one whose
//     subjects do not cover the template's Filter or the dead-letter
//     subject, and warns about memory storage and discard=old limits, both
//     of which lose events.
package jetstream
