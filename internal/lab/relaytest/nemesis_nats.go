package relaytest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The nemesis's NATS is a cluster of three nats-server processes holding
// the relay's stream with three replicas, the setup docs/guarantees.md
// recommends besides a single server that fsyncs every write. Every run
// uses it, so that every fault kind, the stream leader's SIGKILL among
// them, can be drawn in every schedule, and a seed replays the same faults
// whatever ran before. What a single server adds, recovering its only copy
// of the stream from its store after a SIGKILL, e2e/outages covers
// (TestFaultNATSKilled); the nemesis's nats-kill kills the three nodes at
// once, and each recovers its copy from its store.

// natsNodes is the size of the nemesis's NATS cluster.
const natsNodes = 3

// startNATS starts the cluster, a proxy in front of each node (the relay
// knows only the proxies: the nodes do not advertise their addresses), and
// creates the stream with three replicas and the duplicate window.
func (n *Nemesis) startNATS() {
	n.t.Helper()
	n.nats = StartNATSClusterWith(n.t, NATSClusterOptions{Nodes: natsNodes, NoAdvertise: true, NoRace: true})
	n.env.UseNATS(n.nats.URLs())
	var urls []string
	for i := 0; i < n.nats.Len(); i++ {
		p := StartProxy(n.t, n.nats.Addr(i))
		n.natsProxies = append(n.natsProxies, p)
		urls = append(urls, "nats://"+p.Addr())
	}
	n.env.RelayNATS = strings.Join(urls, ",")
	cfg := jetstream.StreamConfig{
		Name: n.env.Stream, Subjects: []string{n.env.subjectFilter(), n.env.DeadSubj},
		Storage: jetstream.FileStorage, Retention: jetstream.LimitsPolicy, Discard: jetstream.DiscardNew,
		Duplicates: DuplicateWindow, Replicas: natsNodes, AllowBatchPublish: FastIngest(),
	}
	for deadline := time.Now().Add(FaultWait); ; time.Sleep(200 * time.Millisecond) {
		// The cluster may still be meeting its peers.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := n.env.JS.CreateStream(ctx, cfg)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			n.fatalf("create the stream with %d replicas: %v", natsNodes, err)
		}
	}
}

// natsDown stops every node, with SIGKILL or SIGTERM, one after the
// other: the nodes still up elect a new stream leader in between (a node
// stopped gracefully hands its leadership on), with the relay's publishes
// in flight, so the stop is a leader change (LeaderChange, completed by
// leaderRecovered) like a leader's kill.
func (n *Nemesis) natsDown(ctx context.Context, kill bool) {
	n.t.Helper()
	info, err := n.streamInfo(ctx)
	if err != nil {
		n.fatalf("read the stream before stopping NATS: %v", err)
	}
	n.fire()
	n.leaderChanges = append(n.leaderChanges, LeaderChange{Before: info.State.LastSeq, Window: n.window})
	for i := 0; i < n.nats.Len(); i++ {
		if kill {
			n.nats.Kill(i)
		} else if err := n.nats.Stop(i, time.Minute); err != nil {
			n.finding("%v", err)
		}
	}
}

// natsUp starts every node again on its store.
func (n *Nemesis) natsUp() {
	n.t.Helper()
	for i := 0; i < n.nats.Len(); i++ {
		n.nats.Start(i)
	}
}

// killLeader SIGKILLs the node that leads the stream, with the stream's
// last sequence read just before (LeaderChange), and starts it again on
// its store after the hold time.
func (n *Nemesis) killLeader(ctx context.Context, st Step) {
	n.t.Helper()
	var info *jetstream.StreamInfo
	for {
		var err error
		if info, err = n.streamInfo(ctx); err != nil {
			n.fatalf("find the stream's leader: %v", err)
		}
		if info.Cluster != nil && n.nats.Index(info.Cluster.Leader) >= 0 {
			break
		}
		time.Sleep(20 * time.Millisecond) // between leaders
	}
	leader := n.nats.Index(info.Cluster.Leader)
	n.fire()
	n.nats.Kill(leader)
	n.leaderChanges = append(n.leaderChanges, LeaderChange{Before: info.State.LastSeq, Window: n.window})
	n.logf("stream leader %s killed (SIGKILL) at stream seq %d", info.Cluster.Leader, info.State.LastSeq)
	time.Sleep(st.Hold)
	n.nats.Start(leader)
}

// leaderRecovered completes the last LeaderChange once the relay has
// recovered: the stream's last sequence, and the new leader.
func (n *Nemesis) leaderRecovered() {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), FaultWait)
	defer cancel()
	info, err := n.streamInfo(ctx)
	if err != nil {
		n.fatalf("after the leader's kill: %v", err)
	}
	lc := &n.leaderChanges[len(n.leaderChanges)-1]
	lc.Recovered = info.State.LastSeq
	leader := "none"
	if info.Cluster != nil {
		leader = info.Cluster.Leader
	}
	n.logf("stream leader now %s; stream seq %d once recovered", leader, lc.Recovered)
}

// leaderElections counts the elections of the stream's leader the nodes
// logged. Those that no kill explains (a node starved of CPU missing its
// heartbeats) change the leader as a kill does, but no LeaderChange
// bounds them: the summary shows them beside an order failure.
func (n *Nemesis) leaderElections() int {
	line := fmt.Sprintf("new stream leader for '$G > %s'", n.env.Stream)
	total := 0
	for i := 0; i < n.nats.Len(); i++ {
		total += strings.Count(n.nats.Output(i), line)
	}
	return total
}

// natsProxiesDo applies a proxy fault to every node's proxy.
func (n *Nemesis) natsProxiesDo(f func(*Proxy)) {
	for _, p := range n.natsProxies {
		f(p)
	}
}
