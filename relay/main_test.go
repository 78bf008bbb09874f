package relay

import (
	"fmt"
	"os"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/devenv"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// server is the Postgres the tests create their databases in: a private
// cluster, or OUTBOX_TEST_PG_URL. Without Postgres the tests fail, never
// skip.
var server relaytest.Server

func TestMain(m *testing.M) {
	var cluster *devenv.Postgres
	if url := os.Getenv("OUTBOX_TEST_PG_URL"); url != "" {
		server = relaytest.ExternalServer(url)
	} else {
		var err error
		if cluster, err = relaytest.StartCluster(nil); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL:", err)
			os.Exit(1)
		}
		server = cluster
	}
	code := m.Run()
	if cluster != nil {
		cluster.Close()
	}
	os.Exit(code)
}
