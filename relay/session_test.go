package relay

import (
	"time"

	"testing"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// TestOneWALSender: the relay needs one replication connection at a time.
// A session learns the server's identity on its own connection: a second
// one opened while the session holds the slot (IDENTIFY_SYSTEM before the
// tail read) finds no free WAL sender where max_wal_senders leaves one for
// the relay, and the relay reconnects forever without streaming.
func TestOneWALSender(t *testing.T) {
	cluster := relaytest.PrivateCluster(t, map[string]string{"max_wal_senders": "1"})
	env := relaytest.NewEnv(t, cluster)
	cfg := testConfig(t, env)
	mustTakeUp(t, env, cfg, checkpoint.Bootstrap)
	env.Tx(relaytest.NewRow("order", "1", "created", `{}`))
	runUntilCaughtUp(t, env, cfg)
	env.WaitStored(1, 10*time.Second)
}
