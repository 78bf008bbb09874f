package nemesis

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// suite is the relay binary built for these tests, their Postgres, and
// this test binary re-executed as NATS child processes (unused here: the
// nemesis runs a NATS cluster built from the nats-server module).
var suite relaytest.Suite

// TestMain serves NATS when this is such a child, else builds the relay.
func TestMain(m *testing.M) { relaytest.RunWithBuiltRelay(m, &suite) }
