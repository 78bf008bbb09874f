package jetstream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"
)

// TestForEachClusteredStream: an ordered consumer replaces its JetStream
// consumer at every fetch, and on a clustered stream the fetch can reach
// the servers before the new consumer listens ("no responders"). A read
// of many batches (the relay's tail reads, its reconciliation after an
// outage, verify) must still read the whole stream, every time.
func TestForEachClusteredStream(t *testing.T) {
	t.Parallel()
	cluster := relaytest.StartNATSClusterWith(t, relaytest.NATSClusterOptions{Nodes: 3, NoRace: true})
	nc, err := nats.Connect(cluster.URLs(), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stream natsjs.Stream
	for {
		// The cluster may still be meeting its peers.
		stream, err = js.CreateStream(ctx, natsjs.StreamConfig{Name: "READ", Subjects: []string{"read.>", "dead"}, Replicas: 3, Storage: natsjs.FileStorage})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("create an R3 stream: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	const total = 40_000
	for i := 0; i < total; i++ {
		if _, err := js.PublishAsync(fmt.Sprintf("read.%d", i%7), []byte("x")); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 999 {
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				t.Fatal("publishing timed out")
			}
		}
	}
	for attempt := 1; attempt <= 3; attempt++ {
		n := uint64(0)
		err := jssink.ForEach(ctx, stream, []string{"read.>", "dead"}, jssink.Read{}, func(m *natsjs.RawStreamMsg) bool {
			n++
			if m.Sequence != n {
				t.Fatalf("read %d: message %d has sequence %d", attempt, n, m.Sequence)
			}
			return true
		})
		if err != nil || n != total {
			t.Fatalf("read %d of a %d-message R3 stream: %d messages, %v", attempt, total, n, err)
		}
	}
}
