// Package consumer is the consuming half of the transactional outbox: the
// seed article's idempotent consumer on a JetStream pull consumer. Each
// message's handler runs inside a Postgres transaction that also records
// the event in processed_events; the transaction commits, then the message
// is acknowledged.
//
//	cons, _ := js.CreateOrUpdateConsumer(ctx, "OUTBOX", jetstream.ConsumerConfig{
//		Durable: "billing", FilterSubject: "outbox.order.>", AckPolicy: jetstream.AckExplicitPolicy,
//	})
//	c, _ := consumer.New(pool, cons, func(ctx context.Context, tx pgx.Tx, m *consumer.Message) error {
//		_, err := tx.Exec(ctx, `UPDATE invoices SET ...`, m.AggregateID)
//		return err
//	})
//	err := c.Run(ctx) // until ctx ends
//
// NewSQL is the same for database/sql: the handler gets a *sql.Tx, on any
// Postgres driver that takes $1 placeholders (pgx's stdlib, lib/pq).
//
// Prerequisites: the tables processed_events and failed_events of
// migrations/sql/00005_processed_events.sql (`outbox-relay migrate` creates
// them next to the outbox table; a service with its own database creates
// the same two tables there; Run checks them first). A durable pull
// consumer with AckPolicy explicit and no MaxDeliver (see Traps).
//
// Guarantees:
//
//   - Effects once per event and consumer name. The handler's writes and
//     the row (consumer, event_id) in processed_events commit together.
//     The event id is the message's Nats-Msg-Id, the outbox row id, so a
//     redelivery (a crash or lost ack between commit and ack, an AckWait
//     expiry) and a duplicate in the stream alike find the row, skip the
//     handler and are acknowledged. A handler still running when its
//     message is redelivered elsewhere holds the row's lock: the other
//     delivery waits for its outcome.
//   - Ack after commit. A message is acknowledged only once its transaction
//     committed (or the event was found processed), and acknowledged
//     synchronously, so Run's return means the server has the acks.
//   - Retries with growing delays. A handler error rolls the transaction
//     back and naks the message with a delay that doubles from
//     WithBackoff's base up to its maximum. A handler that panics counts
//     as failing.
//   - Failures recorded, then terminated. When a handler fails on the
//     WithMaxDeliveries-th delivery (5 by default), or returns an error
//     wrapped with Permanent, the message is written to failed_events
//     (consumer, event id, stream and sequence, subject, deliveries, the
//     error, headers and payload) in a transaction of its own and only
//     then terminated. A message without a Nats-Msg-Id is recorded and
//     terminated at once, under the id "<stream>:<sequence>". If the
//     record cannot be written the message is naked, never dropped.
//   - Drain. When ctx ends, Run stops pulling, finishes the message in
//     hand and the few already buffered (WithPullBatch), within
//     WithDrainTimeout; what is left is naked for another instance. A
//     handler still running then sees its context cancelled (and, with
//     NewSQL, its transaction rolled back by database/sql): nothing of it
//     commits.
//   - Traces continue. The handler's context carries the message's trace
//     context (the relay's span, a child of the producer's), so the
//     handler's own spans join the producer's trace; WithTracerProvider
//     adds a consumer span per delivery, failed deliveries marked.
//
// Traps:
//
//   - The server must not give up on its own: a consumer with MaxDeliver
//     set would stop redelivering a message after an outage of Postgres
//     without it being recorded anywhere, so New refuses one. The count of
//     deliveries includes those that found Postgres unreachable.
//   - Order: messages are handled one at a time in delivery order, but a
//     failing message is retried later while the next ones go on, as in the
//     seed's relay (a poison message does not block the others). Run
//     several Consumers (goroutines or processes) on the same durable
//     consumer for throughput; order across them is not kept.
//   - The name in processed_events is the durable consumer's name unless
//     WithName says otherwise. Renaming a consumer runs every event again.
//   - A handler must do its work through tx. Effects outside the database
//     (an e-mail, an HTTP call) are not undone by the rollback and can
//     happen more than once.
//   - The handler should finish within the consumer's AckWait; while it
//     runs the message is kept in progress (InProgress), so a slow handler
//     delays its redelivery rather than racing it.
package consumer
