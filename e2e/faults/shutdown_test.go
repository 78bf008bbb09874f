package faults

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// finalConfirmTimeout mirrors the replication package's bound on the final
// confirmation at shutdown.
const finalConfirmTimeout = 5 * time.Second

// TestShutdownPostgresBlackholed: SIGTERM while the path to Postgres is
// blackholed (a partition that sends no reset, so nothing fails, it only
// hangs). The relay drains, gives the final confirmation its own short
// deadline, says the final position was not confirmed and exits 0, within
// --drain-timeout plus that deadline: not the minutes TCP takes to give
// up. A relay started once the partition heals replays from the slot's
// position and skips what the stream holds: every event once.
func TestShutdownPostgresBlackholed(t *testing.T) {
	t.Parallel()
	env := suite.NewEnv(t)
	proxy := relaytest.StartProxy(t, env.PGAddr())
	env.RelayPG = env.PGURLVia(proxy.Addr())
	const drain = 2 * time.Second
	relay := suite.StartRelay(t, env, "--drain-timeout", drain.String())
	relay.WaitLog("streaming from the slot", 30*time.Second)
	for i := range 5 {
		env.Tx(relaytest.NewRow("order", fmt.Sprint(i), "order.created", `{}`),
			relaytest.NewRow("order", fmt.Sprint(i), "order.paid", `{}`))
	}
	env.WaitRows(30 * time.Second)

	proxy.Blackhole()
	// Well within the relay's silence limit: the session is still up, and
	// its final confirmation has to go through the partition.
	time.Sleep(500 * time.Millisecond)
	relay.Term()
	start := time.Now()
	// The session's part: drain, then at most finalConfirmTimeout for the
	// final confirmation, then say it was not confirmed.
	relay.WaitLog("the final position was not confirmed", drain+finalConfirmTimeout+5*time.Second)
	t.Logf("final position given up %s after SIGTERM", time.Since(start).Round(time.Millisecond))
	for _, line := range strings.Split(relay.Logs(), "\n") {
		if strings.Contains(line, "the final position was not confirmed") {
			t.Log(line)
		}
	}
	// The process's part: the relay waits at most a second for its pool's
	// connections to close (pgx would wait 15 s per cut connection for a
	// cancel request nobody answers).
	code := relay.Wait(drain + finalConfirmTimeout + 8*time.Second)
	t.Logf("exited %d, %s after SIGTERM", code, time.Since(start).Round(time.Millisecond))
	if code != 0 {
		t.Fatalf("relay exited %d on SIGTERM with Postgres unreachable", code)
	}

	proxy.Restore()
	env.RelayPG = ""
	next := suite.StartRelay(t, env)
	next.WaitLog("streaming from the slot", 30*time.Second)
	env.Tx(relaytest.NewRow("order", "after", "order.created", `{}`))
	// Settle waits for the slot to confirm all WAL written (every PubAck
	// of the next relay is in: nothing it sent is still on its way), reads
	// its duplicate acks (0: it skipped what the stream held rather than
	// leave it to the 1 s dedup window), drains it and checks.
	relaytest.Settle(t, env, next, nil, relaytest.Expect{})
}
