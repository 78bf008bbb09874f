package relaytest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The fault cases' building blocks: a standard load, faults injected with
// publishes in flight, the recovery log lines they require, and settle,
// the end of every case (docs/guarantees.md).

// Log lines of the recovery paths the cases require.
const (
	LogStreaming = "streaming from the slot"
	// After a publish failure (an outage, an ack timeout, an error reply):
	// the Publisher read the stream and sent again what it lacks.
	LogOutageOver = "JetStream accepts events again"
	// At a session's start: the slot replays events the stream holds.
	LogSkipStored = "skipping exactly those"
	// After a publish failure: the stream held events whose PubAck was
	// lost, and the Publisher does not send them again.
	LogLostAcks = "whose PubAck was lost"
)

// FaultWait bounds each wait for a relay to get going or to recover.
const FaultWait = time.Minute

// Load starts the standard write workload; stop ends it.
func Load(t testing.TB, env *Env) (w *Workload, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	w = &Workload{Writers: 3, MaxTxRows: 10, Aggregates: 30, RollbackEvery: 7, Pace: 40 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, env, 0) }()
	return w, func() {
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("workload: %v", err)
		}
	}
}

// InFlight writes a backlog of n events and waits until the relay has
// publishes of them in flight: the moment to inject a fault. It returns
// the scrape of the relay's metrics that saw them.
func InFlight(t testing.TB, env *Env, relay *Relay, n int) Metrics {
	t.Helper()
	env.Backlog(n)
	m := relay.WaitInFlightMetrics(FaultWait)
	t.Logf("fault injected with %v publishes in flight", m[InFlightMetric])
	return m
}

// Settle ends a fault case with the load stopped: the stream holds every
// committed row, the slot confirmed all WAL written (the relay has nothing
// left to send), JetStream acknowledged no publish of this relay as a
// duplicate, SIGTERM drains it (exit 0), and the check holds with x.
func Settle(t testing.TB, env *Env, relay *Relay, w *Workload, x Expect) Result {
	t.Helper()
	env.WaitRows(3 * time.Minute)
	env.WaitSlotCaughtUp(FaultWait)
	if relay.Exited() {
		t.Fatalf("relay exited before the end of the case; log:\n%s", relay.Logs())
	}
	if n, err := relay.Metric(DuplicateAcksMetric); err != nil || n != 0 {
		t.Errorf("%s = %v (%v): JetStream dropped publishes of events it already held; the relay promises none", DuplicateAcksMetric, n, err)
	}
	requireFastIngest(t, relay)
	relay.Drain(30 * time.Second)
	x.Workload = w
	res := env.CheckWith(x)
	t.Logf("check: %s", res)
	return res
}

// StopRelay stops a relay cleanly (SIGTERM, exit 0).
func StopRelay(t testing.TB, r *Relay) {
	t.Helper()
	r.Drain(30 * time.Second)
}

// RequireLog fails the test unless the relay logged substr at least n
// times: the recovery path the case is about ran.
func RequireLog(t testing.TB, r *Relay, substr string, n int) {
	t.Helper()
	if got := r.CountLog(substr); got < n {
		t.Errorf("the relay logged %q %d times, want at least %d: the recovery path this case is about did not run", substr, got, n)
	}
}

// WaitLogCount waits until the relay logged substr at least n times.
func WaitLogCount(t testing.TB, r *Relay, substr string, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for r.CountLog(substr) < n {
		if time.Now().After(deadline) || r.Exited() {
			t.Fatalf("the relay logged %q %d times within %s, want %d; log:\n%s", substr, r.CountLog(substr), timeout, n, r.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// LogNumber returns the number field of the relay's first log line with
// message msg, and whether there is one.
func LogNumber(r *Relay, msg, field string) (float64, bool) {
	for _, line := range strings.Split(r.Logs(), "\n") {
		var entry map[string]any
		if json.Unmarshal([]byte(line), &entry) != nil || entry["message"] != msg {
			continue
		}
		n, ok := entry[field].(float64)
		return n, ok
	}
	return 0, false
}

// WaitLong is short under `go test -short`, long otherwise.
func WaitLong(short, long time.Duration) time.Duration {
	if testing.Short() {
		return short
	}
	return long
}

// KillNATSTwice SIGKILLs the NATS server twice with publishes in flight,
// restarts it from its store after 3 s, and requires the relay's log to
// say the outage is over after each.
func KillNATSTwice(t testing.TB, env *Env, relay *Relay, w *Workload, nats *NATSProcess) {
	t.Helper()
	for i := 1; i <= 2; i++ {
		w.WaitTx(t, 30, FaultWait)
		InFlight(t, env, relay, 2000)
		nats.Kill()
		time.Sleep(3 * time.Second) // the outage
		nats.Start()
		WaitLogCount(t, relay, LogOutageOver, i, FaultWait)
	}
	w.WaitTx(t, 20, FaultWait)
}

// ProxySide puts a proxy the test can cut between the relay and one
// side, "nats" or "postgres".
func ProxySide(t testing.TB, env *Env, side string) *Proxy {
	t.Helper()
	if side == "nats" {
		proxy := StartProxy(t, strings.TrimPrefix(env.NATSURL, "nats://"))
		env.RelayNATS = "nats://" + proxy.Addr()
		return proxy
	}
	proxy := StartProxy(t, env.PGAddr())
	env.RelayPG = env.PGURLVia(proxy.Addr())
	return proxy
}

// CutThenPartition resets the connection behind proxy for 3 s, then
// blackholes it (nothing passes, no reset), each with publishes in
// flight, and requires the relay's log to say recovered after each.
func CutThenPartition(t testing.TB, env *Env, relay *Relay, w *Workload, proxy *Proxy, recovered string) {
	t.Helper()
	CutThenPartitionNoticed(t, env, relay, w, proxy, recovered, nil)
}

// Noticed is how a relay shows that it gave up on a connection that went
// silent without being closed: a log line, and a gauge that reads 0 once
// it did. A partition heals by resetting its connections (Proxy.Restore),
// which a relay that never notices the silence survives as well, only
// later: the notice must come before the heal.
type Noticed struct {
	Log   string
	Gauge string
}

// ReplicationSilenceNoticed is the replication session's dead-connection
// detector (replication/session.go, checkAlive): no message from Postgres
// for wal_sender_timeout and half as much again, not even after asking
// for one, ends the session.
var ReplicationSilenceNoticed = &Noticed{Log: "presuming the connection dead", Gauge: "outbox_relay_replication_connected"}

// CutThenPartitionNoticed is CutThenPartition that, when noticed is not
// nil, also requires the relay to notice the partition before it heals.
func CutThenPartitionNoticed(t testing.TB, env *Env, relay *Relay, w *Workload, proxy *Proxy, recovered string, noticed *Noticed) {
	t.Helper()
	base := relay.CountLog(recovered)
	w.WaitTx(t, 30, FaultWait)
	InFlight(t, env, relay, 2000)
	proxy.Cut()
	time.Sleep(3 * time.Second) // the outage
	proxy.Restore()
	WaitLogCount(t, relay, recovered, base+1, FaultWait)
	w.WaitTx(t, 20, FaultWait)
	InFlight(t, env, relay, 2000)
	partition := WaitLong(15*time.Second, 25*time.Second)
	heal := time.Now().Add(partition)
	proxy.Blackhole()
	if noticed != nil {
		waitNoticed(t, relay, noticed, heal)
	}
	time.Sleep(time.Until(heal)) // the rest of the partition
	proxy.Restore()
	WaitLogCount(t, relay, recovered, base+2, FaultWait)
	w.WaitTx(t, 20, FaultWait)
}

// waitNoticed waits until the relay logged n.Log once more than before
// and reports n.Gauge 0, failing the test when that has not happened by
// heal.
func waitNoticed(t testing.TB, relay *Relay, n *Noticed, heal time.Time) {
	t.Helper()
	base, started := relay.CountLog(n.Log), time.Now()
	for {
		gauge, err := relay.Metric(n.Gauge)
		if relay.CountLog(n.Log) > base && err == nil && gauge == 0 {
			t.Logf("the relay noticed the partition %s after it began", time.Since(started).Round(100*time.Millisecond))
			return
		}
		if time.Now().After(heal) {
			t.Errorf("the relay did not notice a %s partition before it healed: logged %q %d times during it, %s = %v (%v)",
				heal.Sub(started).Round(time.Second), n.Log, relay.CountLog(n.Log)-base, n.Gauge, gauge, err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
