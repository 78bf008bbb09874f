package relay

import (
	"fmt"
	"os"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// server is the Postgres the tests create their databases in: a private
// cluster, or OUTBOX_TEST_PG_URL. Without Postgres the tests fail, never
// skip.
var server relaytest.Server

func TestMain(m *testing.M) {
	srv, closeServer, err := relaytest.OpenServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	server = srv
	code := m.Run()
	closeServer()
	os.Exit(code)
}
