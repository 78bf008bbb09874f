package main

import (
	"os"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// The relay under test is this test binary, re-executed: TestMain runs
// main() when OUTBOX_RELAY_TEST_MAIN is set. The child is built with the
// same flags (-race included) as the tests.
var (
	server   relaytest.Server
	relayBin = relaytest.Binary{Path: os.Args[0], Env: []string{"OUTBOX_RELAY_TEST_MAIN=1"}}
)

func TestMain(m *testing.M) {
	relaytest.ServeNATSIfAsked()
	if os.Getenv("OUTBOX_RELAY_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	relaytest.RunWithServer(m, &server)
}

// newEnv is a test's own database and NATS server.
func newEnv(t *testing.T) *relaytest.Env { return relaytest.NewEnv(t, server) }

// startRelay runs the relay against env with extra flags.
func startRelay(t *testing.T, env *relaytest.Env, extra ...string) *relaytest.Relay {
	args := append([]string{"run"}, env.RelayArgs()...)
	return relaytest.StartRelay(t, relayBin, append(args, extra...)...)
}
