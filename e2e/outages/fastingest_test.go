package outages

import (
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// The outages of fast-ingest publishing (the relay's --fast-ingest auto
// on a stream with allow_batched), whatever OUTBOX_TEST_FAST_INGEST says:
// NATS killed mid-batch, a stream leader killed mid-batch, a batch the
// server abandons. Each with publishes in flight, the duplicate window
// (1 s) passed before the relay can publish again, and the relay's
// recovery required to have run; then 0 missing, 0 duplicated, and
// commit order (bent within the documented bound by a leader change).

// logFastIngest is what the relay logs at start when it publishes in
// fast-ingest batches.
const logFastIngest = "publishing in fast-ingest batches"

// TestFaultFastIngestNATSKilled: NATS is SIGKILLed twice mid-batch, its
// restart held 3 s, with the relay publishing in fast-ingest batches:
// stored messages whose flow ack was lost must be found in the stream,
// not republished.
func TestFaultFastIngestNATSKilled(t *testing.T) {
	t.Parallel()
	env := suite.NewEnv(t)
	nats := relaytest.StartNATSProcess(t, suite.NATS, true)
	env.UseNATS(nats.URL())
	relay := suite.StartRelay(t, env, "--ack-timeout", "2s", "--stream-allow-batched", "--fast-ingest", "auto")
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	relaytest.RequireLog(t, relay, logFastIngest, 1)
	w, stop := relaytest.Load(t, env)
	relaytest.KillNATSTwice(t, env, relay, w, nats)
	stop()
	relaytest.Settle(t, env, relay, w, relaytest.Expect{MinTx: 80})
}

// TestFaultFastIngestLeaderKilled: the stream leader of a 3-node cluster
// is SIGKILLed mid-batch and restarted 5 s later.
func TestFaultFastIngestLeaderKilled(t *testing.T) {
	t.Parallel()
	env := suite.NewEnv(t)
	cluster, stream := startR3Stream(t, env, true)
	relay := suite.StartRelay(t, env, "--ack-timeout", "2s", "--fast-ingest", "auto")
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	relaytest.RequireLog(t, relay, logFastIngest, 1)
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

// TestFaultFastIngestBatchAbandoned: the relay is stopped (SIGSTOP)
// mid-batch for longer than the server keeps a batch without a message
// (its batch timeout, 1.5 s here) and than the duplicate window; resumed,
// it sends the rest of the batch, which the server no longer knows and
// refuses. The ack timeout is longer than the stop, so only that refusal
// can send the relay to recovery.
func TestFaultFastIngestBatchAbandoned(t *testing.T) {
	t.Parallel()
	env := suite.NewEnv(t)
	env.StartNATS(devenv.NATSOptions{BatchTimeout: 1500 * time.Millisecond})
	// A batch stays open for a second without a message (under the
	// server's timeout): under the paced load, the stop finds one open.
	relay := suite.StartRelay(t, env, "--ack-timeout", "30s", "--stream-allow-batched", "--fast-ingest", "auto", "--fast-ingest-linger", "1s")
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	relaytest.RequireLog(t, relay, logFastIngest, 1)
	w, stop := relaytest.Load(t, env)
	// The stop lands mid-batch when the relay has sent part of a batch;
	// between batches (the last one committed) the relay just starts a
	// new one. Stop it again until two batches were abandoned.
	abandoned := 0
	for attempt := 1; abandoned < 2; attempt++ {
		if attempt > 8 {
			t.Fatalf("%d of %d stops were followed by a recovery: a stop lands mid-batch, and the server refuses the rest of the batch it abandoned", abandoned, attempt-1)
		}
		w.WaitTx(t, 30, relaytest.FaultWait)
		relaytest.InFlight(t, env, relay, 100)
		if err := syscall.Kill(relay.Pid(), syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second) // past the batch timeout and the duplicate window
		if err := syscall.Kill(relay.Pid(), syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		// The ack timeout is longer than the stop: an outage now is the
		// server refusing the rest of a batch it abandoned.
		if waitCount(relay, relaytest.LogOutageOver, abandoned+1, 10*time.Second) {
			abandoned++
		}
		n, err := relay.Metric(relaytest.InFlightMetric)
		t.Logf("stop %d: %d batches abandoned; %v events in flight after it (%v)", attempt, abandoned, n, err)
	}
	relaytest.RequireLog(t, relay, logBatchUnknown, 1)
	w.WaitTx(t, 20, relaytest.FaultWait)
	stop()
	relaytest.Settle(t, env, relay, w, relaytest.Expect{MinTx: 80})
}

// logBatchUnknown is what the relay logs when the server refuses a batch
// message of a batch it abandoned.
const logBatchUnknown = "batch publish ID unknown"

// waitCount reports whether relay's log says substr n times within d.
func waitCount(relay *relaytest.Relay, substr string, n int, d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if relay.CountLog(substr) >= n {
			return true
		}
	}
	return false
}
