//go:build !nolab

package main

import "github.com/outbox-relay/outbox-relay/internal/lab/natsproc"

// The default build is the lab's: beside the relay's commands it has dev
// and bench, which link the example order service, the throwaway servers
// and the benchmark, and it can serve as the nats-server process of bench
// and the tests. The production build (-tags nolab, nolab.go) links none
// of it.

// devCommand is the dev command; cli embeds it where dev is listed.
type devCommand struct {
	Dev devCmd `cmd:"" help:"Run everything locally: embedded NATS, a throwaway Postgres, the relay and demo orders."`
}

// benchCommand is the bench command; cli embeds it where bench is listed.
type benchCommand struct {
	Bench benchCmd `cmd:"" help:"Measure throughput, latency and resources against the machine's limits, in one run."`
}

// serveNATSIfAsked runs this process as the nats-server of bench and the
// tests when natsproc.Start started it as one, and then never returns.
func serveNATSIfAsked() { natsproc.ServeIfAsked() }
