package nemesis

import (
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// The nemesis flags: go test -run TestNemesis ./e2e/nemesis -args
// -nemesis.seed=N -nemesis.duration=20m -nemesis.faults=relay-kill,nats-kill
var (
	nemesisSeed     = flag.Uint64("nemesis.seed", 0, "seed of TestNemesis's fault schedule; the same seed replays the same schedule (0: from the clock)")
	nemesisDuration = flag.Duration("nemesis.duration", 0, "planned time of TestNemesis's faults, gaps and holds without the recovery waits (default 60s, 20s with -short)")
	nemesisFaults   = flag.String("nemesis.faults", "", "comma-separated fault kinds TestNemesis draws from (default all)")
	nemesisRate     = flag.Float64("nemesis.rate", relaytest.DefaultNemesisRate, "events a second TestNemesis's workload aims at; the test fails under half of it")
)

// TestNemesis runs a seeded random schedule of every fault the suite
// knows (relay SIGKILL and SIGTERM, every nats-server's SIGKILL and
// graceful stop, the SIGKILL of the stream's leader in the three-node NATS
// cluster, Postgres fast and immediate stops, connection resets and
// blackholes on the Postgres and the NATS side, a second relay instance on
// the slot, a large transaction on a table outside the publication), one
// after the other, each struck while the relay has publishes in flight,
// healed and recovered from before the next, under concurrent writes
// (2,000 events a second by default) with multi-row and rolled-back
// transactions. After every step no relay may have had a publish
// acknowledged as a duplicate. Then it stops the load, waits for the slot
// to confirm everything, stops the relay with SIGTERM and checks the
// stream against the table: nothing missing, extra or stored twice (the
// stream's dedup window is 1 s and half the relay restarts are held past
// it), and commit order kept, but among the events in flight when a
// stream leader was killed (relaytest.LeaderChange).
func TestNemesis(t *testing.T) {
	seed := *nemesisSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	duration := *nemesisDuration
	if duration == 0 {
		duration = relaytest.WaitLong(20*time.Second, 60*time.Second)
	}
	t.Logf("nemesis seed %d (replay with -args -nemesis.seed=%d)", seed, seed)
	faults, err := relaytest.ParseFaults(*nemesisFaults)
	if err != nil {
		t.Fatalf("nemesis seed %d: -nemesis.faults: %v", seed, err)
	}
	schedule := relaytest.NewSchedule(seed, duration, faults)
	t.Log(schedule)

	cluster, err := relaytest.StartCluster(nil)
	if err != nil {
		t.Fatalf("nemesis seed %d: %v", seed, err)
	}
	t.Cleanup(func() { cluster.Close() })
	env := relaytest.NewEnv(t, cluster)
	replay := fmt.Sprintf("go test -race -count=1 -timeout 60m -run '^TestNemesis$' -v ./e2e/nemesis -args -nemesis.seed=%d -nemesis.duration=%s", seed, duration)
	if *nemesisFaults != "" {
		replay += " -nemesis.faults=" + *nemesisFaults
	}
	if *nemesisRate != relaytest.DefaultNemesisRate {
		replay += fmt.Sprintf(" -nemesis.rate=%g", *nemesisRate)
	}
	n := relaytest.NewNemesis(t, relaytest.NemesisConfig{
		Env: env, Cluster: cluster, Relay: suite.Relay, Schedule: schedule, Replay: replay, Rate: *nemesisRate,
		RelayFlags: []string{"--ack-timeout", "2s", "--duplicate-window", relaytest.DuplicateWindow.String()},
	})
	res := n.Run()
	t.Log(res.Summary())
}
