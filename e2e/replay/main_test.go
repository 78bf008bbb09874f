// Package replay tests `outbox-relay replay` end to end: the copies of a
// time range's rows, where they go, and that they blind neither verify
// nor a relay's resume logic.
package replay

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// suite is the relay binary built for these tests, their Postgres, and
// this test binary re-executed as the NATS child processes.
var suite relaytest.Suite

// TestMain serves NATS when this is such a child, else builds the relay.
func TestMain(m *testing.M) { relaytest.RunWithBuiltRelay(m, &suite) }
