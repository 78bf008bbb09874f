package room

import (
	"fmt"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"
)

// TestNoRoomAccountQuota: the relay's account has a JetStream file
// storage quota (max_file) and its stream, created by the relay without
// limits, uses it up under load. The relay names the account's quota,
// survives a SIGKILL meanwhile, and goes on by itself once the operator
// raises the quota (the server's configuration reloaded).
func TestNoRoomAccountQuota(t *testing.T) {
	t.Parallel()
	env := suite.NewEnv(t)
	quota := func(maxFile int) relaytest.NATSConf {
		// Clients without credentials are the account's user.
		return relaytest.NATSConf{TopLevel: fmt.Sprintf(`accounts {
  APP {
    jetstream { max_file: %d, max_mem: 1048576 }
    users: [{user: app, password: app}]
  }
}
no_auth_user: app
`, maxFile)}
	}
	server := relaytest.StartNATSClusterWith(t, relaytest.NATSClusterOptions{Nodes: 1, Conf: quota(512 << 10)})
	env.UseNATS(server.URLs())
	flags := []string{"--ack-timeout", "2s"}
	relay := suite.StartRelay(t, env, flags...)
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	w, stop := relaytest.Load(t, env)
	b := waitBlocked(t, env, relay, 0, jssink.RoomAccountStorage, "max_file", true)
	relay = b.killWhileBlocked(t, relay, "max_file", flags...)
	server.Reconfigure(0, quota(256<<20))
	b.requireRoomAgain(t, relay)
	// As for max_bytes, a smaller message than the one refused may fit.
	settle(t, env, relay, w, stop, relaytest.Expect{Reordered: true})
}
