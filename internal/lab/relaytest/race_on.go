//go:build race

package relaytest

// raceEnabled reports whether this binary was built with -race: programs
// the tests build (nats-server) are built alike, from the same cache.
const raceEnabled = true
