package outages

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"
)

// The stream leader of a 3-node JetStream cluster changes under load. An
// event on the wire when the leader goes can be lost or refused while
// later ones, sent before the relay noticed and paused, are stored by the
// new leader; the relay republishes it after them. Nothing the relay can
// do once those are sent keeps them out (only a server-side precondition
// such as Nats-Expected-Last-Msg-Id could, which a stream shared by
// several writers cannot use). So order may bend there, within a bound
// (docs/guarantees.md, relaytest.LeaderChange): both events of an
// inversion are among those that can have been in flight at the change
// (within twice the relay's --window, in commit order, after the last
// event stored before it), the later-committed one stored after the
// change and the earlier one by the time the relay had recovered. Any
// other reordering fails, as do loss and duplicates.

// relayWindow is the relay's --window in these tests: its default.
const relayWindow = jssink.DefaultWindow

// TestFaultClusterLeaderKilled: the stream's leader is killed with SIGKILL
// while publishes are in flight, and restarted 5 s later. A new leader
// takes over; the relay recovers. (The relay is paused by the first
// "no responders" reply, so in practice nothing is reordered; the bound
// is the one the step-down test exercises.)
func TestFaultClusterLeaderKilled(t *testing.T) {
	t.Parallel()
	env := suite.NewEnv(t)
	cluster, stream := startR3Stream(t, env, relaytest.FastIngest())
	relay := suite.StartRelay(t, env, "--ack-timeout", "2s")
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	w, stop := relaytest.Load(t, env)
	w.WaitTx(t, 30, relaytest.FaultWait)
	relaytest.InFlight(t, env, relay, 2000)
	leader, before := streamState(t, stream)
	t.Logf("killing stream leader %s (SIGKILL) at stream seq %d", leader, before)
	cluster.Kill(cluster.Index(leader))
	time.Sleep(5 * time.Second) // the node is down
	cluster.Start(cluster.Index(leader))
	relaytest.WaitLogCount(t, relay, relaytest.LogOutageOver, 1, relaytest.FaultWait)
	change := recovered(t, env, stream, before)
	w.WaitTx(t, 20, relaytest.FaultWait)
	stop()
	settleCluster(t, env, relay, w, stream, []relaytest.LeaderChange{change})
}

// TestFaultClusterLeaderSteppedDown: the stream's leader steps down (as
// for an upgrade) three times, each with publishes in flight: the old
// leader drops what it has not stored and a new one is elected at once,
// so events do land after later ones here, within the bound.
func TestFaultClusterLeaderSteppedDown(t *testing.T) {
	t.Parallel()
	env := suite.NewEnv(t)
	_, stream := startR3Stream(t, env, relaytest.FastIngest())
	relay := suite.StartRelay(t, env, "--ack-timeout", "2s")
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	w, stop := relaytest.Load(t, env)
	w.WaitTx(t, 30, relaytest.FaultWait)
	var changes []relaytest.LeaderChange
	for i := 0; i < 3; i++ {
		relaytest.InFlight(t, env, relay, 3000)
		leader, before := streamState(t, stream)
		m, err := env.NC.Request("$JS.API.STREAM.LEADER.STEPDOWN."+env.Stream, nil, 10*time.Second)
		if err != nil {
			t.Fatalf("step down stream leader %s: %v", leader, err)
		}
		t.Logf("stream leader %s stepped down at stream seq %d: %s", leader, before, m.Data)
		// Every event committed so far acknowledged: the relay recovered
		// from this change (if it had to) before the next.
		changes = append(changes, recovered(t, env, stream, before))
	}
	relaytest.RequireLog(t, relay, relaytest.LogOutageOver, 1)
	w.WaitTx(t, 20, relaytest.FaultWait)
	stop()
	settleCluster(t, env, relay, w, stream, changes)
}

// streamState returns the name of the stream's leader and its last
// sequence, read just before a leader change (LeaderChange.Before).
func streamState(t *testing.T, stream jetstream.Stream) (leader string, lastSeq uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := stream.Info(ctx)
	if err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
		t.Fatalf("stream info: %v", err)
	}
	return info.Cluster.Leader, info.State.LastSeq
}

// recovered waits until the slot confirmed the WAL written so far (the
// relay recovered from the leader change at stream seq before) and returns
// the change with the stream's last sequence then.
func recovered(t *testing.T, env *relaytest.Env, stream jetstream.Stream, before uint64) relaytest.LeaderChange {
	t.Helper()
	env.WaitSlotCaughtUp(relaytest.FaultWait)
	leader, last := streamState(t, stream)
	t.Logf("stream leader now %s; stream seq %d once recovered", leader, last)
	return relaytest.LeaderChange{Before: before, Recovered: last, Window: relayWindow}
}

// startR3Stream starts a 3-node cluster and creates the test's stream on
// it, replicated three times, with the Env's dedup window, allowing
// batched publishing when batched is set.
func startR3Stream(t *testing.T, env *relaytest.Env, batched bool) (*relaytest.NATSCluster, jetstream.Stream) {
	t.Helper()
	cluster := relaytest.StartNATSCluster(t, 3)
	env.UseNATS(cluster.URLs())
	for deadline := time.Now().Add(relaytest.FaultWait); ; time.Sleep(200 * time.Millisecond) {
		// The cluster may still be meeting its peers.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		stream, err := env.JS.CreateStream(ctx, jetstream.StreamConfig{Name: env.Stream, Subjects: []string{"outbox.*.*", env.DeadSubj},
			Replicas: 3, Storage: jetstream.FileStorage, Discard: jetstream.DiscardNew, Duplicates: env.DuplicateWindow,
			AllowBatchPublish: batched})
		cancel()
		if err == nil {
			return cluster, stream
		}
		if time.Now().After(deadline) {
			t.Fatalf("create an R3 stream: %v", err)
		}
	}
}

// settleCluster ends a leader-change case with the load stopped: once
// the relay acknowledged everything and every replica is current, Settle
// checks the stream, tolerating an event stored after later ones only
// within the bound of one of the leader changes.
func settleCluster(t *testing.T, env *relaytest.Env, relay *relaytest.Relay, w *relaytest.Workload, stream jetstream.Stream, changes []relaytest.LeaderChange) {
	t.Helper()
	env.WaitRows(3 * time.Minute)
	env.WaitSlotCaughtUp(relaytest.FaultWait)
	relaytest.WaitReplicasCurrent(t, stream)
	res := relaytest.Settle(t, env, relay, w, relaytest.Expect{MinTx: 50, LeaderChanges: changes})
	t.Logf("%d inversions tolerated, each within one of the leader changes %+v", len(res.Tolerated), changes)
	for _, d := range res.Tolerated[:min(len(res.Tolerated), 3)] {
		t.Logf("tolerated: %s", d)
	}
}
