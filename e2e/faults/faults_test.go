package faults

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// The fault suite: each case runs real faults against real processes under
// concurrent writes (several writers, transactions of 1 to 10 rows, some
// rolled back), injects each fault while the relay has publishes in
// flight (a backlog just written, the in-flight gauge above 0), requires
// the recovery path it exercises to have run (a log line), and ends with
// relaytest.Settle: the slot confirms all WAL written, JetStream acknowledged no
// publish as a duplicate, SIGTERM drains the relay (exit 0), and the check
// finds nothing missing, nothing rolled back, nothing twice, nothing out
// of commit order. Streams have a 1 s dedup window (Env.DuplicateWindow),
// so an event published again is stored again and counted.
// `go test -short` shortens the long waits; it skips nothing. Here the
// relay killed, Postgres crashed or stopped, and shutdown; the outages
// (NATS, network, stream full, cluster leader) are in e2e/outages.

// Tests that mostly wait (outages, partitions) run in parallel with each
// other; those that time how fast something happens run alone.

// The Postgres side gave way to a shutdown the relay could not confirm
// (the other recovery log lines are relaytest's: LogStreaming...).
const logReleased = "released the replication connection so Postgres can shut down"

// TestFaultRelayKilledRepeatedly: SIGKILL 20 times (10 with -short), each with publishes in
// flight or at a random instant of start-up, once in the middle of
// publishing a 100,000-row transaction. After every kill with publishes
// in flight the next relay that streams skips what the stream already
// holds, and no relay process, killed or not, had a publish acknowledged
// as a duplicate (read from its metrics at the instant it was killed).
func TestFaultRelayKilledRepeatedly(t *testing.T) {
	env := suite.NewEnv(t)
	logFrom := len(env.ClusterLog())
	// Default flags: replaying the big transaction keeps a relay busy for
	// longer than wal_sender_timeout (5 s here); the relay caps its status
	// interval at half of it by itself.
	var flags []string
	first := suite.StartRelay(t, env, flags...)
	first.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	w, stop := relaytest.Load(t, env)
	w.WaitTx(t, 20, relaytest.FaultWait)
	killAt(t, first, relaytest.InFlight(t, env, first, 1000))
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	bigDone := make(chan error, 1)
	var relays []*relaytest.Relay
	var inFlightKills []int // indexes into relays
	began := time.Now()
	// With -short (CI's other Postgres versions) half as many kills, the
	// big transaction sooner.
	kills, bigAt := 20, 8
	if testing.Short() {
		kills, bigAt = 10, 3
	}
	for i := 0; i < kills; i++ {
		if i > 0 {
			t.Logf("kill %d at %s", i, time.Since(began).Round(100*time.Millisecond))
		}
		relay := suite.StartRelay(t, env, flags...)
		relays = append(relays, relay)
		if i == bigAt {
			// One statement: committed within a second or two.
			go func() {
				_, err := env.Pool.Exec(context.Background(), `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
					SELECT 'bulk', 'b1', 'imported', '{"n": 1}' FROM generate_series(1, 100000)`)
				bigDone <- err
			}()
		}
		switch {
		case i == bigAt+1:
			// Killed while the big transaction is being published.
			if err := <-bigDone; err != nil {
				t.Fatalf("the 100,000-row transaction: %v", err)
			}
			before := env.CountStored()
			for deadline := time.Now().Add(2 * time.Minute); env.CountStored() < before+20_000; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the relay stored %d events of the big transaction in 2m", env.CountStored()-before)
				}
			}
			killAt(t, relay, relay.WaitInFlightMetrics(relaytest.FaultWait))
			inFlightKills = append(inFlightKills, i)
		case i%5 == 4:
			// At a random instant of start-up: the delay is the fault's timing.
			time.Sleep(time.Duration(rng.Intn(1000)) * time.Millisecond)
			killAtStartUp(t, relay, scrapeIfServing(t, relay))
		default:
			relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
			if i == bigAt+2 {
				// Past the big transaction first: a relay killed before the
				// slot confirmed it leaves the next one to read 100,000
				// stored events and replay the transaction again, at length.
				env.WaitSlotCaughtUp(3 * time.Minute)
			}
			killAt(t, relay, relaytest.InFlight(t, env, relay, 200+rng.Intn(1300)))
			inFlightKills = append(inFlightKills, i)
		}
	}
	t.Logf("kill %d at %s", kills, time.Since(began).Round(100*time.Millisecond))
	stop()
	last := suite.StartRelay(t, env, flags...)
	relays = append(relays, last)
	last.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	relaytest.Settle(t, env, last, w, relaytest.Expect{MinTx: 100})

	// A relay killed with publishes in flight leaves events in the stream
	// beyond the slot's position (the slot is confirmed only after the
	// PubAcks, at most five times a second); the next relay that streams
	// must skip them. After the big transaction's kill there are thousands.
	var notSkipped []string
	if next := nextStreaming(relays); next == nil || next.CountLog(relaytest.LogSkipStored) == 0 {
		notSkipped = append(notSkipped, fmt.Sprintf("the first relay's (pid %d)", first.Pid()))
	}
	for _, i := range inFlightKills {
		if next := nextStreaming(relays[i+1:]); next == nil || next.CountLog(relaytest.LogSkipStored) == 0 {
			notSkipped = append(notSkipped, fmt.Sprintf("kill %d (relay pid %d)", i+1, relays[i].Pid()))
		}
	}
	inFlight := 1 + len(inFlightKills) // the first relay's too
	t.Logf("%d kills with publishes in flight; the next streaming relay skipped stored events after %d of them", inFlight, inFlight-len(notSkipped))
	if len(notSkipped) > 0 {
		t.Errorf("after %d of %d kills with publishes in flight the next relay that streamed skipped nothing the stream held: %s",
			len(notSkipped), inFlight, strings.Join(notSkipped, ", "))
	}
	// relays[bigAt+1] was killed in the big transaction (not relays[9]
	// with -short, where the last relay is relays[10]).
	if next := nextStreaming(relays[bigAt+2:]); next == nil {
		t.Error("no relay streamed after the kill in the big transaction")
	} else if n, ok := relaytest.LogNumber(next, "the stream already holds events the slot will replay: skipping exactly those", "events"); !ok || n < 1000 {
		t.Errorf("after the kill in the big transaction the next relay skipped %v stored events (logged: %v), want thousands", n, ok)
	}
	if lines := walsenderTimeouts(env, logFrom); len(lines) > 0 {
		t.Errorf("Postgres timed out the relay's walsender %d times (a status update every 2 s): %v", len(lines), lines)
	}
}

// walsenderTimeouts returns the server log lines, after offset from, of
// the test slot's walsenders terminated for want of a reply within
// wal_sender_timeout.
func walsenderTimeouts(env *relaytest.Env, from int) []string {
	log := env.ClusterLog()
	if from > len(log) {
		from = 0
	}
	pids := map[string]bool{}
	var out []string
	for _, line := range strings.Split(log[from:], "\n") {
		_, rest, ok := strings.Cut(line, " [")
		if !ok {
			continue
		}
		pid, _, _ := strings.Cut(rest, "]")
		switch {
		case strings.Contains(line, fmt.Sprintf("starting logical decoding for slot %q", env.Slot)):
			pids[pid] = true
		case pids[pid] && strings.Contains(line, "terminating walsender process due to replication timeout"):
			out = append(out, line)
		}
	}
	return out
}

// killAt SIGKILLs relay right after the scrape of its metrics m (nil when
// it served none yet, so had published nothing) and fails the test when
// JetStream had acknowledged any of its publishes as a duplicate: a relay
// that resent what the stream held, within the 1 s dedup window.
func killAt(t *testing.T, relay *relaytest.Relay, m relaytest.Metrics) {
	t.Helper()
	relay.Kill()
	if n, ok := m[relaytest.DuplicateAcksMetric]; n != 0 || (m != nil && !ok) {
		t.Errorf("relay pid %d had %v publishes acknowledged as duplicates when it was killed (served: %v)", relay.Pid(), n, ok)
	}
}

// killAtStartUp is killAt for a relay that may not have published yet:
// it serves /metrics before its publisher registers the duplicate-acks
// series, and a series not served yet counts no duplicate.
func killAtStartUp(t *testing.T, relay *relaytest.Relay, m relaytest.Metrics) {
	t.Helper()
	relay.Kill()
	if n := m[relaytest.DuplicateAcksMetric]; n != 0 {
		t.Errorf("relay pid %d had %v publishes acknowledged as duplicates when it was killed during its start-up", relay.Pid(), n)
	}
}

// scrapeIfServing scrapes the relay's metrics when it serves them yet (it
// logs the address before it connects to anything); nil otherwise.
func scrapeIfServing(t *testing.T, relay *relaytest.Relay) relaytest.Metrics {
	t.Helper()
	if _, err := relay.MetricsAddr(); err != nil {
		return nil
	}
	m, err := relay.Metrics()
	if err != nil {
		t.Errorf("relay pid %d: scrape before the kill: %v", relay.Pid(), err)
	}
	return m
}

// nextStreaming returns the first relay of rs that streamed.
func nextStreaming(rs []*relaytest.Relay) *relaytest.Relay {
	for _, r := range rs {
		if strings.Contains(r.Logs(), relaytest.LogStreaming) {
			return r
		}
	}
	return nil
}

// TestFaultPostgresCrash: Postgres stops (fast) or is killed (immediate
// shutdown, a crash) under load, with publishes in flight, and restarts;
// the relay reconnects and streams again.
func TestFaultPostgresCrash(t *testing.T) {
	for _, mode := range []string{"fast", "immediate"} {
		t.Run(mode, func(t *testing.T) {
			cluster := relaytest.PrivateCluster(t, nil)
			env := relaytest.NewEnv(t, cluster)
			relay := suite.StartRelay(t, env)
			relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
			w, stop := relaytest.Load(t, env)
			w.WaitTx(t, 30, relaytest.FaultWait)
			relaytest.InFlight(t, env, relay, 2000)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := cluster.Stop(ctx, mode); err != nil {
				t.Fatal(err)
			}
			time.Sleep(3 * time.Second) // the outage
			if err := cluster.Start(ctx); err != nil {
				t.Fatal(err)
			}
			relaytest.WaitLogCount(t, relay, relaytest.LogStreaming, 2, relaytest.FaultWait)
			w.WaitTx(t, 20, relaytest.FaultWait)
			stop()
			relaytest.Settle(t, env, relay, w, relaytest.Expect{MinTx: 50})
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
			cluster := relaytest.PrivateCluster(t, nil)
			env := relaytest.NewEnv(t, cluster)
			relay := suite.StartRelay(t, env, "--ack-timeout", "1s", "--window", window)
			relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
			w, stop := relaytest.Load(t, env)
			w.WaitTx(t, 30, relaytest.FaultWait)
			relaytest.InFlight(t, env, relay, 500)
			env.NATS.Stop()
			relay.WaitLog("publish failed", relaytest.FaultWait) // the relay is blocked on NATS
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
			relaytest.WaitLogCount(t, relay, relaytest.LogOutageOver, 1, relaytest.FaultWait)
			w.WaitTx(t, 20, relaytest.FaultWait)
			stop()
			relaytest.RequireLog(t, relay, logReleased, 1)
			relaytest.Settle(t, env, relay, w, relaytest.Expect{MinTx: 50})
			if took > 20*time.Second {
				t.Errorf("fast shutdown took %s with the relay blocked", took)
			}
			t.Logf("fast shutdown with NATS down took %s", took.Round(time.Millisecond))
		})
	}
}
