// Package atomic tests run --atomic-transactions end to end: every
// transaction stored whole across SIGKILLs of the relay with restarts held
// past the 1 s duplicate window, the fallback of a transaction larger than
// an atomic batch, and the refusal of a stream that does not allow them.
package atomic

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// suite is the relay binary built for these tests and their Postgres.
var suite relaytest.Suite

func TestMain(m *testing.M) { relaytest.RunWithBuiltRelay(m, &suite) }
