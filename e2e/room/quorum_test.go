package room

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"
)

// quorumFix is what the relay and status say to do about a lost quorum.
const quorumFix = "nats server report jetstream"

// TestNoRoomQuorumLost: a 3-node JetStream cluster with an R3 stream; two
// of its servers are killed (SIGKILL) with publishes in flight, so that
// the stream and JetStream's meta group have no quorum, twice. The relay
// holds the events and names the lost quorum; the first time it goes on
// by itself once the servers are back; the second time it is killed
// meanwhile, and the relay started without a quorum waits for one, saying
// so, then goes on. The leader that lost its quorum keeps what it could
// not commit and may commit it once elected again: a republished event
// would be stored twice, whatever the 1 s dedup window.
func TestNoRoomQuorumLost(t *testing.T) {
	t.Parallel()
	env := suite.NewEnv(t)
	cluster := relaytest.StartNATSCluster(t, 3)
	env.UseNATS(cluster.URLs())
	stream := createStream(t, env, jetstream.StreamConfig{Replicas: 3})
	flags := []string{"--ack-timeout", "2s"}
	relay := suite.StartRelay(t, env, flags...)
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	w, stop := relaytest.Load(t, env)

	// The relay waits through the lost quorum and goes on by itself.
	w.WaitTx(t, 30, relaytest.FaultWait)
	relaytest.InFlight(t, env, relay, 2000)
	from := blocks(relay)
	killed := killFollowers(t, cluster, stream)
	b := waitBlocked(t, env, relay, from, jssink.RoomQuorum, quorumFix, false)
	time.Sleep(5 * time.Second) // a leader without its quorum steps down after a while
	startAll(cluster, killed)
	b.requireRoomAgain(t, relay)
	relaytest.WaitReplicasCurrent(t, stream)

	// Killed while blocked: the relay started without a quorum waits for
	// one, and says why.
	w.WaitTx(t, 30, relaytest.FaultWait)
	relaytest.InFlight(t, env, relay, 2000)
	from = blocks(relay)
	killed = killFollowers(t, cluster, stream)
	b = waitBlocked(t, env, relay, from, jssink.RoomQuorum, quorumFix, false)
	relay.Kill()
	time.Sleep(2 * env.DuplicateWindow)
	relay = suite.StartRelay(t, env, flags...)
	relaytest.WaitFor(t, relaytest.FaultWait, "the new relay to say it waits for a quorum", func() bool {
		for _, line := range strings.Split(relay.Logs(), "\n") {
			if strings.Contains(line, "JetStream not available yet") && strings.Contains(line, quorumFix) {
				return true
			}
		}
		return relay.Exited()
	})
	if relay.Exited() {
		t.Fatalf("the relay started without a quorum exited; log:\n%s", relay.Logs())
	}
	b.watch(t, 3*time.Second)
	startAll(cluster, killed)
	relay.WaitLog(relaytest.LogStreaming, 2*relaytest.FaultWait)
	relaytest.WaitReplicasCurrent(t, stream)
	settle(t, env, relay, w, stop, relaytest.Expect{MinTx: 60})
}

// killFollowers kills (SIGKILL) the two servers that are not the stream's
// leader, and returns them.
func killFollowers(t *testing.T, cluster *relaytest.NATSCluster, stream jetstream.Stream) []int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := stream.Info(ctx)
	if err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
		t.Fatalf("stream info: %v", err)
	}
	leader := cluster.Index(info.Cluster.Leader)
	var killed []int
	for i := 0; i < 3; i++ {
		if i != leader {
			cluster.Kill(i)
			killed = append(killed, i)
		}
	}
	t.Logf("killed the two followers of stream leader %s (SIGKILL)", info.Cluster.Leader)
	return killed
}

func startAll(cluster *relaytest.NATSCluster, nodes []int) {
	for _, i := range nodes {
		cluster.Start(i)
	}
}
