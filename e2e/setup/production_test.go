package setup

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/doctor"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest/doctortest"
)

// TestProductionStream: on a 3-node JetStream cluster the relay creates
// the stream the README's quick start asks for (three replicas, a max
// age, a size and a message limit, discard new), every replica current,
// and relays into it; doctor finds the replicas and says nothing is
// wrong with the stream.
func TestProductionStream(t *testing.T) {
	env := suite.NewEnv(t)
	cluster := relaytest.StartNATSCluster(t, 3)
	env.UseNATS(cluster.URLs())
	flags := []string{"--stream-replicas", "3", "--stream-max-age", "168h", "--stream-max-bytes", "1GiB", "--stream-max-msgs", "1000000"}
	relay := suite.StartRelay(t, env, flags...)
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	w, stop := relaytest.Load(t, env)
	w.WaitTx(t, 30, relaytest.FaultWait)
	stop()
	relaytest.Settle(t, env, relay, w, relaytest.Expect{MinTx: 30})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := env.StreamHandle(30 * time.Second).Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	if cfg.Replicas != 3 || cfg.MaxAge != 168*time.Hour || cfg.MaxBytes != 1<<30 || cfg.MaxMsgs != 1000000 ||
		cfg.Discard != jetstream.DiscardNew || cfg.Storage != jetstream.FileStorage || cfg.Retention != jetstream.LimitsPolicy {
		t.Errorf("the relay created %+v", cfg)
	}
	relaytest.WaitFor(t, relaytest.FaultWait, "two current followers", func() bool {
		info, err := env.StreamHandle(10 * time.Second).Info(ctx)
		if err != nil || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			return false
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current || r.Offline {
				return false
			}
		}
		return true
	})
	rep, _, out := doctortest.Run(t, suite.Relay, env, flags...)
	if got := doctortest.FindingOf(rep, "nats.replicas", doctor.OK); len(got) != 1 || !strings.Contains(got[0].Message, "has 3 replicas") {
		t.Errorf("doctor does not find the 3 replicas:\n%s", out)
	}
	for _, f := range rep.Findings {
		if strings.HasPrefix(f.Check, "nats.stream") && f.Severity != doctor.OK {
			t.Errorf("doctor: %s %s: %s", f.Severity, f.Check, f.Message)
		}
	}
}
