package relay

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// server is the Postgres the tests create their databases in: a private
// cluster, or OUTBOX_TEST_PG_URL. Without Postgres the tests fail, never
// skip.
var server relaytest.Server

func TestMain(m *testing.M) {
	relaytest.RunWithServer(m, &server)
}
