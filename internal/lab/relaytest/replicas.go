package relaytest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// WaitReplicasCurrent waits until the clustered stream has a leader and
// every other replica is online and current: a consumer a check reads
// with may be placed on a node still catching up after its restart, and
// read a stream that lacks what that node has not caught up with yet (406
// messages fewer, once).
func WaitReplicasCurrent(t testing.TB, stream jetstream.Stream) {
	t.Helper()
	WaitFor(t, FaultWait, "every replica of the stream to be current", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		info, err := stream.Info(ctx)
		if err != nil || info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != info.Config.Replicas-1 {
			return false
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current || r.Offline {
				return false
			}
		}
		return true
	})
}
