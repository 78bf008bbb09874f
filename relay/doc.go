// Package relay is the WAL relay: it wires replication, decode, sink and
// checkpoint into one pipeline and owns the start-up protocol that decides
// how a relay takes up its slot. Its sibling, package poll, reads the
// table instead; both stand on internal/core. Only wire.go and oneshot.go
// name the JetStream implementation (sink/jetstream): the rest publishes
// to a sink.Destination and reads back through a sink.Reader.
//
//	Postgres WAL ─▶ replication.Stream ─decode.Event─▶ pipeline ─▶ sink.Destination ─PubAck─▶ checkpoint
//
// At start the relay resumes its slot; or creates it and first publishes,
// from the slot's snapshot, the rows already in the table; or, asked to
// repair, recreates it and publishes every committed row the stream lacks;
// or refuses with an error wrapping contract.ErrGap when events may be
// missing. Before each replication session it reads which events of the
// coming replay the stream already holds, so exactly those are skipped.
//
// Run needs Postgres with wal_level=logical, a role with REPLICATION, the
// outbox table in the publication (see package migrations), and NATS with
// JetStream. Cancelling Run's context drains in-flight publishes, sends the
// final status update and returns nil.
package relay
