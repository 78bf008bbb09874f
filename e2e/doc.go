// Package e2e holds the end-to-end tests of the outbox-relay binary against
// real Postgres and JetStream, in test-only packages split so that each
// runs well within go test's default timeout: faults, outages, nemesis,
// poll, takeup, messages and setup. Each builds the binary once
// (relaytest.RunWithBuiltRelay) and runs it as a child process; the tests
// that need package main's internals stay in cmd/outbox-relay.
package e2e
