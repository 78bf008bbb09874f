// Package orders is the example order service of the seed article
// ("Transactional outbox pattern in Go with PostgreSQL") written with this
// repository's libraries: CreateOrder inserts the order and its
// order.created event in one transaction (package outbox), the relay
// publishes the event to JetStream, and Billing consumes it idempotently
// (package consumer): one invoice per order, however often the message is
// delivered.
//
//	CreateOrder ─tx─▶ orders + outbox_events ─WAL─▶ outbox-relay ─▶ JetStream ─▶ Billing ─tx─▶ invoices + processed_events
//
// Prerequisites: `outbox-relay migrate` on the database (the outbox table
// and processed_events), then Migrate for the example's own tables. The
// `dev` command and the Compose file run the whole loop.
package orders
