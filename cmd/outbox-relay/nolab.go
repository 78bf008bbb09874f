//go:build nolab

package main

import (
	"github.com/alecthomas/kong"
)

// The production build (go build -tags nolab) is the relay without the
// lab: no example order service, throwaway servers, benchmark or embedded
// nats-server. dev and bench are not listed; asked for anyway, they say
// where to find them.

// devCommand stands in for the lab's dev command (lab.go).
type devCommand struct {
	Dev labOnlyCmd `cmd:"" hidden:"" passthrough:"" help:"Not in this production build: run go run ./cmd/outbox-relay dev from a checkout."`
}

// benchCommand stands in for the lab's bench command (lab.go).
type benchCommand struct {
	Bench labOnlyCmd `cmd:"" hidden:"" passthrough:"" help:"Not in this production build: run go run ./cmd/outbox-relay bench from a checkout."`
}

// labOnlyCmd is a lab command asked of the production build. It takes any
// arguments, so that the answer is the same however it was called.
type labOnlyCmd struct {
	Args []string `arg:"" optional:""`
}

// Run says that the command is not in this build, and how to run it:
// exit 2, as for an unknown command.
func (c *labOnlyCmd) Run(k *kong.Context) error {
	name := k.Selected().Name
	k.Errorf("%s is not in this production build of outbox-relay (built with -tags nolab, without the example order service, "+
		"the throwaway servers and the benchmark); from a checkout of the source, run: go run ./cmd/outbox-relay %s", name, name)
	return withExit(exitUsage, nil)
}

// serveNATSIfAsked does nothing: the production build cannot serve as a
// nats-server (the lab build's natsproc child).
func serveNATSIfAsked() {}
