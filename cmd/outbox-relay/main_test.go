package main

import (
	"os"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// The relay under test is this test binary, re-executed: TestMain runs
// main() when OUTBOX_RELAY_TEST_MAIN is set. The child is built with the
// same flags (-race included) as the tests. It serves NATS too
// (relaytest.ServeNATSIfAsked). The black-box tests of the binary that
// need nothing of package main are in e2e/.
var suite = relaytest.Suite{
	Relay: relaytest.Binary{Path: os.Args[0], Env: []string{"OUTBOX_RELAY_TEST_MAIN=1"}},
	NATS:  relaytest.Binary{Path: os.Args[0]},
}

func TestMain(m *testing.M) {
	relaytest.ServeNATSIfAsked()
	if os.Getenv("OUTBOX_RELAY_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	relaytest.RunWithServer(m, &suite.Server)
}
