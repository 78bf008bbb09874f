// Package natsproc runs a nats-server with JetStream (devenv's server
// options) in a process of its own, so that its CPU time can be measured
// apart from its client's (the benchmark) and so that it can be killed
// with SIGKILL and restarted on the same port and store (the fault tests).
//
// The process is the calling program run again: Start re-executes it with
// the server's options, as JSON, in an environment variable, and the
// program's main (or a test binary's TestMain) must call ServeIfAsked first
// thing, before it parses flags. ServeIfAsked then serves until SIGTERM and
// exits; it never returns in that process.
package natsproc

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
)

// envVar carries the server's options to the child.
const envVar = "OUTBOX_RELAY_NATS_PROCESS"

// ServeIfAsked turns this process into the nats-server Start asked for,
// when it was started that way: it serves until SIGTERM or an interrupt,
// then shuts the server down and exits 0 (2 when the server cannot
// start). Otherwise it returns at once.
func ServeIfAsked() {
	raw, ok := os.LookupEnv(envVar)
	if !ok {
		return
	}
	var opts devenv.NATSOptions
	if err := json.Unmarshal([]byte(raw), &opts); err != nil {
		fmt.Fprintf(os.Stderr, "nats-server process: %s: %v\n", envVar, err)
		os.Exit(2)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	n, err := devenv.StartNATS(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nats-server process:", err)
		os.Exit(2)
	}
	<-sig
	n.Stop()
	os.Exit(0)
}
