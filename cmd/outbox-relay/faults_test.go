package main

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/sink"
)

// The fault suite: each case runs real faults against real processes under
// concurrent writes (several writers, transactions of 1 to 20 rows, some
// rolled back) and ends with the table-versus-stream check: nothing
// missing, nothing extra (rolled back), no duplicates, no event of an
// aggregate before an earlier one. `go test -short` shortens the long
// waits; it skips nothing.

// Tests that mostly wait (outages, partitions) run in parallel with each
// other; those that time how fast something happens run alone.

// load runs the standard write workload until stop is called.
func load(t *testing.T, env *relaytest.Env) (stop func() *relaytest.Workload) {
	ctx, cancel := context.WithCancel(context.Background())
	w := &relaytest.Workload{Writers: 3, MaxTxRows: 10, Aggregates: 30, RollbackEvery: 7, Pace: 40 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, env, 0) }()
	return func() *relaytest.Workload {
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("workload: %v", err)
		}
		return w
	}
}

// settleAndCheck waits until the stream holds every committed row, then
// compares the two.
func settleAndCheck(t *testing.T, env *relaytest.Env, w *relaytest.Workload) {
	t.Helper()
	env.WaitRows(3 * time.Minute)
	time.Sleep(300 * time.Millisecond) // let stray replays land before the check
	rep := env.Check()
	t.Logf("%d committed events checked, %d rolled back; %d messages", rep.Rows, len(w.Aborted()), rep.Messages)
	if rep.Rows < 100 {
		t.Errorf("only %d events written: the load did not run", rep.Rows)
	}
}

func waitLong(short, long time.Duration) time.Duration {
	if testing.Short() {
		return short
	}
	return long
}

// TestFaultRelayKilledRepeatedly: SIGKILL at random instants, 20 times,
// once in the middle of publishing a 100,000-row transaction.
func TestFaultRelayKilledRepeatedly(t *testing.T) {
	env := newEnv(t)
	first := startRelay(t, env)
	first.WaitLog("streaming from the slot", 30*time.Second)
	stop := load(t, env)
	time.Sleep(500 * time.Millisecond)
	first.Kill()
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	bigDone := make(chan []string, 1)
	streaming := 0
	for i := 0; i < 20; i++ {
		relay := startRelay(t, env)
		if i == 8 {
			go func() {
				rows := make([]relaytest.Row, 100_000)
				for j := range rows {
					rows[j] = relaytest.NewRow("bulk", "b1", "imported", `{"n": 1}`)
				}
				bigDone <- env.Tx(rows...)
			}()
		}
		if i == 9 {
			// Kill while the big transaction is being published.
			before := env.CountStored()
			deadline := time.Now().Add(2 * time.Minute)
			for env.CountStored() < before+20_000 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			relay.Kill()
			streaming++
			continue
		}
		// Every fifth kill lands at a random instant of start-up; the others
		// at a random instant of streaming.
		if i%5 != 4 {
			relay.WaitLog("streaming from the slot", time.Minute)
		}
		time.Sleep(time.Duration(rng.Intn(1000)) * time.Millisecond)
		relay.Kill()
		if strings.Contains(relay.Logs(), "streaming from the slot") {
			streaming++
		}
	}
	if streaming < 15 {
		t.Errorf("only %d of 20 kills hit a streaming relay", streaming)
	}
	w := stop()
	<-bigDone
	last := startRelay(t, env)
	last.WaitLog("streaming from the slot", 30*time.Second)
	settleAndCheck(t, env, w)
}

// TestFaultNATSStopped: NATS stops for 60 s under load. The slot never
// confirms past an unacknowledged event; the relay keeps answering
// Postgres (wal_sender_timeout is 5 s here), so its walsender survives;
// when NATS is back every event arrives and the slot catches up.
func TestFaultNATSStopped(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	relay := startRelay(t, env, "--ack-timeout", "2s")
	relay.WaitLog("streaming from the slot", 30*time.Second)
	env.Tx(relaytest.NewRow("order", "1", "created", `{}`))
	env.WaitStored(1, 10*time.Second)
	pid := walsenderPID(t, env)
	logFrom := len(env.ClusterLog())
	stop := load(t, env)
	time.Sleep(time.Second)

	env.NATS.Stop()
	first := env.Tx(relaytest.NewRow("order", "2", "during.outage", `{}`))[0]
	var highest pglogrepl.LSN
	for end := time.Now().Add(waitLong(10*time.Second, 60*time.Second)); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		highest = max(highest, env.SlotInfo().ConfirmedFlush)
	}
	if got := walsenderPID(t, env); got != pid {
		t.Errorf("walsender changed from pid %d to %d: Postgres dropped the relay while it waited for NATS", pid, got)
	}
	if strings.Contains(env.ClusterLog()[logFrom:], fmt.Sprintf("[%d] LOG:  terminating walsender process due to replication timeout", pid)) {
		t.Error("Postgres timed out the relay's walsender while NATS was down")
	}
	if err := env.NATS.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	settleAndCheck(t, env, stop())
	// The first event written during the outage committed at this LSN:
	// confirming beyond it while it was unacknowledged would have told
	// Postgres it could be skipped.
	commit, err := pglogrepl.ParseLSN(storedByID(t, env)[first].Header.Get(sink.HeaderCommitLSN))
	if err != nil {
		t.Fatal(err)
	}
	if highest > commit {
		t.Fatalf("during the outage the slot confirmed %s, past the unacknowledged transaction committed at %s", highest, commit)
	}
	waitCaughtUp(t, env, 30*time.Second)
	if relay.Exited() {
		t.Fatal("relay exited during the NATS outage")
	}
	if n := strings.Count(relay.Logs(), "still not accepting"); n > 8 {
		t.Errorf("%d retry log lines in one outage: the log floods", n)
	}
}

// TestFaultNATSKilled: the NATS process is killed with SIGKILL twice under
// load and restarted from its store (sync always, as the README requires);
// the stream's dedup window is 1 s, so a lost PubAck must not mean a
// republished event.
func TestFaultNATSKilled(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	nats := relaytest.StartNATSProcess(t, relayBin, true)
	env.UseNATS(nats.URL())
	relay := startRelay(t, env, "--ack-timeout", "2s", "--duplicate-window", "1s")
	relay.WaitLog("streaming from the slot", 30*time.Second)
	stop := load(t, env)
	for i := 0; i < 2; i++ {
		time.Sleep(2 * time.Second)
		nats.Kill()
		time.Sleep(3 * time.Second)
		nats.Start()
	}
	time.Sleep(2 * time.Second)
	settleAndCheck(t, env, stop())
}

// TestFaultPostgresCrash: Postgres is killed (immediate shutdown, a crash)
// under load and restarted.
func TestFaultPostgresCrash(t *testing.T) {
	for _, mode := range []string{"fast", "immediate"} {
		t.Run(mode, func(t *testing.T) {
			cluster, err := relaytest.StartCluster(nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cluster.Close() })
			env := relaytest.NewEnv(t, cluster)
			relay := startRelay(t, env)
			relay.WaitLog("streaming from the slot", 30*time.Second)
			stop := load(t, env)
			time.Sleep(2 * time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := cluster.Stop(ctx, mode); err != nil {
				t.Fatal(err)
			}
			time.Sleep(3 * time.Second)
			if err := cluster.Start(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Second)
			settleAndCheck(t, env, stop())
			if relay.Exited() {
				t.Fatal("relay exited when Postgres went down")
			}
		})
	}
}

// TestFaultPostgresStopWhileNATSDown: with NATS down the relay waits, but
// it must not keep Postgres from shutting down: a fast shutdown waits for
// its walsenders, which wait for the relay's confirmation. Both with room
// left in the publish window (the relay still reads WAL) and with the
// window full (the relay has stopped reading).
func TestFaultPostgresStopWhileNATSDown(t *testing.T) {
	for name, window := range map[string]string{"window with room": "1024", "window full": "8"} {
		t.Run(name, func(t *testing.T) {
			cluster, err := relaytest.StartCluster(nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cluster.Close() })
			env := relaytest.NewEnv(t, cluster)
			relay := startRelay(t, env, "--ack-timeout", "1s", "--window", window)
			relay.WaitLog("streaming from the slot", 30*time.Second)
			stop := load(t, env)
			time.Sleep(time.Second)
			env.NATS.Stop()
			time.Sleep(3 * time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			started := time.Now()
			if err := cluster.Stop(ctx, "fast"); err != nil {
				t.Fatalf("Postgres could not shut down while the relay waited for NATS: %v", err)
			}
			took := time.Since(started)
			if err := cluster.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if err := env.NATS.Start(); err != nil {
				t.Fatal(err)
			}
			settleAndCheck(t, env, stop())
			if took > 20*time.Second {
				t.Errorf("fast shutdown took %s with the relay blocked", took)
			}
			t.Logf("fast shutdown with NATS down took %s", took.Round(time.Millisecond))
		})
	}
}

// TestFaultNetwork: the connection between relay and NATS, then between
// relay and Postgres, is cut (reset) and blackholed (no reset, nothing
// passes) through a proxy, under load.
func TestFaultNetwork(t *testing.T) {
	for _, side := range []string{"nats", "postgres"} {
		t.Run(side, func(t *testing.T) {
			t.Parallel()
			env := newEnv(t)
			var proxy *relaytest.Proxy
			if side == "nats" {
				proxy = relaytest.StartProxy(t, strings.TrimPrefix(env.NATSURL, "nats://"))
				env.RelayNATS = "nats://" + proxy.Addr()
			} else {
				proxy = relaytest.StartProxy(t, env.PGAddr())
				env.RelayPG = env.PGURLVia(proxy.Addr())
			}
			relay := startRelay(t, env, "--ack-timeout", "2s")
			relay.WaitLog("streaming from the slot", 30*time.Second)
			stop := load(t, env)
			time.Sleep(2 * time.Second)
			proxy.Cut()
			time.Sleep(3 * time.Second)
			proxy.Restore()
			time.Sleep(3 * time.Second)
			proxy.Blackhole()
			time.Sleep(waitLong(15*time.Second, 25*time.Second))
			proxy.Restore()
			time.Sleep(2 * time.Second)
			settleAndCheck(t, env, stop())
			if relay.Exited() {
				t.Fatal("relay exited on a network fault")
			}
		})
	}
}

// TestFaultStreamFull: the stream is at its max_msgs limit with discard
// new. The relay stalls and says so, loses nothing, and goes on when the
// limit is raised.
func TestFaultStreamFull(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := env.JS.CreateStream(ctx, jetstream.StreamConfig{Name: env.Stream, Subjects: []string{"outbox.*.*", env.DeadSubj},
		MaxMsgs: 200, Discard: jetstream.DiscardNew, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	relay := startRelay(t, env, "--ack-timeout", "2s")
	relay.WaitLog("streaming from the slot", 30*time.Second)
	stop := load(t, env)
	relay.WaitLog("maximum messages exceeded", time.Minute)
	if !strings.Contains(relay.Logs(), "raise max_msgs") {
		t.Error("the relay does not say how to get the stream moving again")
	}
	time.Sleep(2 * time.Second)
	if n := env.CountStored(); n != 200 {
		t.Errorf("stream holds %d messages at its limit of 200", n)
	}
	cfg := stream.CachedInfo().Config
	cfg.MaxMsgs = -1
	if _, err := env.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	settleAndCheck(t, env, stop())
}

// TestFaultClusterLeaderKilled: a 3-node JetStream cluster with an R3
// stream loses the stream's leader mid-flow.
func TestFaultClusterLeaderKilled(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	cluster := relaytest.StartNATSCluster(t, 3)
	env.UseNATS(cluster.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := env.JS.CreateStream(ctx, jetstream.StreamConfig{Name: env.Stream, Subjects: []string{"outbox.*.*", env.DeadSubj},
		Replicas: 3, Storage: jetstream.FileStorage, Discard: jetstream.DiscardNew})
	if err != nil {
		t.Fatal(err)
	}
	relay := startRelay(t, env, "--ack-timeout", "2s")
	relay.WaitLog("streaming from the slot", 30*time.Second)
	stop := load(t, env)
	time.Sleep(2 * time.Second)
	info, err := stream.Info(ctx)
	if err != nil || info.Cluster == nil {
		t.Fatalf("stream info: %v", err)
	}
	leader := cluster.Index(info.Cluster.Leader)
	t.Logf("killing stream leader %s", info.Cluster.Leader)
	cluster.Stop(leader)
	time.Sleep(5 * time.Second)
	cluster.Start(leader)
	time.Sleep(2 * time.Second)
	settleAndCheck(t, env, stop())
}
