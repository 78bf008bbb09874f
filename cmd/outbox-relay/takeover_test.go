package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// TestStandbyTakesOver: a second relay on the same slot waits as a standby
// and takes over within seconds when the first one dies; nothing is lost.
func TestStandbyTakesOver(t *testing.T) {
	env := newEnv(t)
	active := startRelay(t, env)
	active.WaitLog("streaming from the slot", 30*time.Second)
	standby := startRelay(t, env)
	standby.WaitLog("waiting as a standby", 30*time.Second)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &relaytest.Workload{Writers: 2, MaxTxRows: 4, Aggregates: 10, Pace: 10 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, env, 0) }()
	time.Sleep(time.Second)
	active.Kill()
	killed := time.Now()
	standby.WaitLog("streaming from the slot", 15*time.Second)
	took := time.Since(killed)
	time.Sleep(time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	env.WaitRows(time.Minute)
	env.Check()
	if took > 10*time.Second {
		t.Errorf("standby took %s to take over", took)
	}
	t.Logf("standby took over %s after the active relay was killed", took.Round(time.Millisecond))
}

// TestPostgresRestart: a fast restart of Postgres under load interrupts the
// relay, which reconnects with backoff and resumes; nothing is lost.
func TestPostgresRestart(t *testing.T) {
	cluster, err := relaytest.StartCluster(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cluster.Close() })
	env := relaytest.NewEnv(t, cluster)
	relay := startRelay(t, env)
	relay.WaitLog("streaming from the slot", 30*time.Second)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &relaytest.Workload{Writers: 2, MaxTxRows: 5, Aggregates: 10, Pace: 10 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, env, 0) }()
	time.Sleep(time.Second)
	sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
	defer scancel()
	if err := cluster.Stop(sctx, "fast"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	if err := cluster.Start(sctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	env.WaitRows(time.Minute)
	env.Check()
	if relay.Exited() {
		t.Fatal("relay exited when Postgres restarted")
	}
	if n := strings.Count(relay.Logs(), "replication interrupted"); n > 6 {
		t.Errorf("%d reconnect log lines for a 5 s restart: the log floods", n)
	}
}
