package takeup

import (
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// TestStandbyTakesOver: a second relay on the same slot waits as a standby
// and takes over within seconds when the first one is killed with
// publishes in flight; it skips what the first one stored; nothing is
// lost or stored twice.
func TestStandbyTakesOver(t *testing.T) {
	env := suite.NewEnv(t)
	active := suite.StartRelay(t, env)
	active.WaitLog(relaytest.LogStreaming, 30*time.Second)
	standby := suite.StartRelay(t, env)
	standby.WaitLog("waiting as a standby", 30*time.Second)

	w, stop := relaytest.Load(t, env)
	w.WaitTx(t, 30, relaytest.FaultWait)
	relaytest.InFlight(t, env, active, 2000)
	active.Kill()
	killed := time.Now()
	standby.WaitLog(relaytest.LogStreaming, 15*time.Second)
	took := time.Since(killed)
	w.WaitTx(t, 20, relaytest.FaultWait)
	stop()
	relaytest.Settle(t, env, standby, w, relaytest.Expect{MinTx: 50})
	if took > 10*time.Second {
		t.Errorf("standby took %s to take over", took)
	}
	t.Logf("standby took over %s after the active relay was killed; it skipped stored events: %v",
		took.Round(time.Millisecond), standby.CountLog(relaytest.LogSkipStored) > 0)
}
