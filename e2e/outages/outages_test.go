package outages

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// The fault suite's outages: NATS stopped, NATS killed, the network to
// either side cut and partitioned, the stream full, a JetStream cluster's
// stream leader killed. Each case is one of the fault suite's (e2e/faults
// says what every case requires and checks), in a package of its own so
// that each package of the suite runs in a few minutes.

// Tests that mostly wait (outages, partitions) run in parallel with each
// other.

// TestFaultNATSStopped: NATS stops for 60 s under load, with publishes in
// flight. The slot never confirms past the first event left
// unacknowledged when NATS stopped (the first, in commit order, that the
// stream stores only once NATS is back); the relay
// keeps answering Postgres (wal_sender_timeout is 5 s here), so its
// walsender survives; when NATS is back the relay reconciles with the
// stream, republishes in order, and the slot catches up.
func TestFaultNATSStopped(t *testing.T) {
	t.Parallel()
	env := suite.NewEnv(t)
	relay := suite.StartRelay(t, env, "--ack-timeout", "2s")
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	env.Tx(relaytest.NewRow("order", "1", "created", `{}`))
	env.WaitStored(1, 10*time.Second)
	pid := walsenderPID(t, env)
	logFrom := len(env.ClusterLog())
	w, stop := relaytest.Load(t, env)
	w.WaitTx(t, 30, relaytest.FaultWait)

	relaytest.InFlight(t, env, relay, 2000)
	// Every event committed before NATS stops commits below this position.
	due := env.WALPosition()
	env.NATS.Stop()
	var highest pglogrepl.LSN
	for end := time.Now().Add(relaytest.WaitLong(10*time.Second, 60*time.Second)); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		highest = max(highest, env.SlotInfo().ConfirmedFlush)
	}
	if got := walsenderPID(t, env); got != pid {
		t.Errorf("walsender changed from pid %d to %d: Postgres dropped the relay while it waited for NATS", pid, got)
	}
	if strings.Contains(env.ClusterLog()[logFrom:], fmt.Sprintf("[%d] LOG:  terminating walsender process due to replication timeout", pid)) {
		t.Error("Postgres timed out the relay's walsender while NATS was down")
	}
	restarted := time.Now()
	if err := env.NATS.Start(); err != nil {
		t.Fatal(err)
	}
	relaytest.WaitLogCount(t, relay, relaytest.LogOutageOver, 1, relaytest.FaultWait)
	w.WaitTx(t, 20, relaytest.FaultWait)
	stop()
	if n := relay.CountLog("still not accepting"); n > 8 {
		t.Errorf("%d retry log lines in one outage: the log floods", n)
	}
	relaytest.Settle(t, env, relay, w, relaytest.Expect{MinTx: 200})
	// The first event, in commit order, that the stream stored only once
	// NATS was back was not acknowledged when it stopped: the relay had
	// it in flight, or queued behind those in flight. Confirming past its
	// commit would have told Postgres it could be skipped.
	first, ok := relaytest.FirstStoredSince(t, env, restarted)
	if !ok || first.Position.CommitLSN >= due {
		t.Fatalf("no event committed before NATS stopped (WAL at %s) was stored after it came back (first: %v %s): the outage left nothing unacknowledged",
			due, ok, first.Position.CommitLSN)
	}
	t.Logf("first event left unacknowledged by the outage: %s, committed at %s (WAL at %s when NATS stopped); the slot confirmed at most %s during the outage",
		first.ID, first.Position.CommitLSN, due, highest)
	if highest > first.Position.CommitLSN {
		t.Fatalf("during the outage the slot confirmed %s, past event %s, unacknowledged when NATS stopped, committed at %s",
			highest, first.ID, first.Position.CommitLSN)
	}
}

// walsenderPID is the pid of the walsender serving the test's slot.
func walsenderPID(t *testing.T, env *relaytest.Env) int32 {
	t.Helper()
	info := env.SlotInfo()
	if !info.Active {
		t.Fatal("slot is not active")
	}
	return info.ActivePID
}

// TestFaultNATSKilled: the NATS process is killed with SIGKILL twice under
// load, with publishes in flight, and restarted from its store (sync
// always, as the README requires). A lost PubAck must not mean a
// republished event: the relay finds it in the stream.
func TestFaultNATSKilled(t *testing.T) {
	t.Parallel()
	env := suite.NewEnv(t)
	nats := relaytest.StartNATSProcess(t, suite.NATS, true)
	env.UseNATS(nats.URL())
	relay := suite.StartRelay(t, env, "--ack-timeout", "2s")
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	w, stop := relaytest.Load(t, env)
	relaytest.KillNATSTwice(t, env, relay, w, nats)
	stop()
	relaytest.Settle(t, env, relay, w, relaytest.Expect{MinTx: 80})
}

// TestFaultNetwork: the connection between relay and NATS, then between
// relay and Postgres, is cut (reset) and blackholed (no reset, nothing
// passes, not even the walsender giving up) through a proxy, under load,
// with publishes in flight. On the Postgres side the relay must give up
// on the silent replication connection by itself before the partition
// heals (the heal resets the connections, which would hide a relay that
// never notices).
func TestFaultNetwork(t *testing.T) {
	for _, side := range []string{"nats", "postgres"} {
		t.Run(side, func(t *testing.T) {
			t.Parallel()
			env := suite.NewEnv(t)
			proxy := relaytest.ProxySide(t, env, side)
			recovered := relaytest.LogOutageOver // NATS side: the Publisher's recovery
			var noticed *relaytest.Noticed
			if side == "postgres" {
				recovered = relaytest.LogStreaming // a new session
				noticed = relaytest.ReplicationSilenceNoticed
			}
			relay := suite.StartRelay(t, env, "--ack-timeout", "2s")
			relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
			w, stop := relaytest.Load(t, env)
			relaytest.CutThenPartitionNoticed(t, env, relay, w, proxy, recovered, noticed)
			stop()
			relaytest.Settle(t, env, relay, w, relaytest.Expect{MinTx: 150})
		})
	}
}

// TestFaultStreamFull: the stream is at its max_msgs limit with discard
// new. The relay stalls and says so, loses nothing, and goes on when the
// limit is raised.
func TestFaultStreamFull(t *testing.T) {
	t.Parallel()
	env := suite.NewEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := env.JS.CreateStream(ctx, jetstream.StreamConfig{Name: env.Stream, Subjects: []string{"outbox.*.*", env.DeadSubj},
		MaxMsgs: 200, Discard: jetstream.DiscardNew, Storage: jetstream.FileStorage, Duplicates: env.DuplicateWindow,
		AllowBatchPublish: relaytest.FastIngest()})
	if err != nil {
		t.Fatal(err)
	}
	relay := suite.StartRelay(t, env, "--ack-timeout", "2s")
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	w, stop := relaytest.Load(t, env)
	relay.WaitLog("maximum messages exceeded", relaytest.FaultWait)
	if !strings.Contains(relay.Logs(), "raise max_msgs") {
		t.Error("the relay does not say how to get the stream moving again")
	}
	if n, err := relay.Metric(relaytest.InFlightMetric); err != nil || n == 0 {
		t.Errorf("stalled at the limit with %v publishes in flight (%v)", n, err)
	}
	if n := env.CountStored(); n != 200 {
		t.Errorf("stream holds %d messages at its limit of 200", n)
	}
	cfg := stream.CachedInfo().Config
	cfg.MaxMsgs = -1
	if _, err := env.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	relaytest.WaitLogCount(t, relay, relaytest.LogOutageOver, 1, relaytest.FaultWait)
	w.WaitTx(t, 20, relaytest.FaultWait)
	stop()
	relaytest.Settle(t, env, relay, w, relaytest.Expect{MinTx: 40})
}
