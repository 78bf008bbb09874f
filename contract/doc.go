// Package contract holds the names and limits other tools rely on: the
// outbox table and its columns, the headers of every message the relay
// publishes and the limits on an event's own headers, the form of a
// Nats-Msg-Id, the default names of the slot, publication, table, stream
// and subjects, and the errors every package and tool agree on. They are
// the contract table of DESIGN.md ("The contract other tools rely on")
// written down once, in Go: the relay, its tools and the application
// libraries (outbox, consumer) all take them from here. Keep them stable.
//
// The package is pure vocabulary: it imports nothing of this module, so
// that any package may import it, and the libraries for applications link
// none of the daemon.
package contract
