package poll

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// Log lines of the polling relay's recovery from a Postgres fault: a batch
// failed, and a later one succeeded.
const (
	logPollFailed    = "poll failed"
	logPollRecovered = "polling works again"
)

// TestPollFaultNetwork: the polling relay's connections to NATS, then to
// Postgres, are cut (reset) and blackholed (nothing passes, no reset)
// through a proxy, under concurrent writes, with publishes in flight; the
// stream's duplicate window is 1 s. The relay recovers by itself (the
// recovery path's log line is required), and the check finds nothing
// missing, nothing stored twice and every aggregate in order.
//
// On the Postgres side a fault with PubAcks in hand fails the batch's
// commit: its rows stay pending and claimed, and the next batch, seconds
// later (past the window), finds the claim and publishes only what the
// stream lacks. On the NATS side the batch waits, its transaction open,
// while the sink reads the stream and republishes what it lacks.
func TestPollFaultNetwork(t *testing.T) {
	for _, side := range []string{"nats", "postgres"} {
		t.Run(side, func(t *testing.T) {
			t.Parallel()
			env := suite.PollEnv(t, suite.NewEnv(t))
			proxy := relaytest.ProxySide(t, env, side)
			recovered := relaytest.LogOutageOver
			if side == "postgres" {
				recovered = logPollRecovered
			}
			relay := suite.StartRelay(t, env, relaytest.PollArgs...)
			relay.WaitLog(relaytest.LogPolling, relaytest.FaultWait)
			w, stop := relaytest.Load(t, env)
			relaytest.CutThenPartition(t, env, relay, w, proxy, recovered)
			stop()
			settlePolled(t, env, relay, w, 150, 0)
			if side == "postgres" {
				relaytest.RequireLog(t, relay, logPollFailed, 2)
				// A batch cut off after its PubAcks left its claim: the
				// next one read the stream instead of publishing again.
				relaytest.RequireLog(t, relay, logClaimed, 1)
				t.Logf("batches found rows claimed by a batch that did not commit %d times", relay.CountLog(logClaimed))
			} else {
				relaytest.RequireLog(t, relay, "reconnected to NATS", 2)
			}
		})
	}
}
