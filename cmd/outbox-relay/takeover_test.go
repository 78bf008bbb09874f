package main

import (
	"testing"
	"time"
)

// TestStandbyTakesOver: a second relay on the same slot waits as a standby
// and takes over within seconds when the first one dies; nothing is lost.
func TestStandbyTakesOver(t *testing.T) {
	env := newEnv(t)
	active := startRelay(t, env)
	active.WaitLog("streaming from the slot", 30*time.Second)
	standby := startRelay(t, env)
	standby.WaitLog("waiting as a standby", 30*time.Second)

	stop := load(t, env)
	time.Sleep(time.Second)
	active.Kill()
	killed := time.Now()
	standby.WaitLog("streaming from the slot", 15*time.Second)
	took := time.Since(killed)
	time.Sleep(time.Second)
	settleAndCheck(t, env, stop())
	if took > 10*time.Second {
		t.Errorf("standby took %s to take over", took)
	}
	t.Logf("standby took over %s after the active relay was killed", took.Round(time.Millisecond))
}
