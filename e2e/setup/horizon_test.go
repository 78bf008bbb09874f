package setup

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// TestRepairWithinTheStreamsLimits: a stream whose own limits removed its
// oldest events (here a message limit with discard old) is repaired
// without publishing them again: --recreate-slot compares only rows
// created after the oldest event the stream holds, and says how many rows
// it left out. Every row is written in a transaction of its own, so each
// has its own created_at.
func TestRepairWithinTheStreamsLimits(t *testing.T) {
	const rows, limit = 60, 20
	env := suite.NewEnv(t)
	relay := suite.StartRelay(t, env, "--stream-max-msgs", fmt.Sprint(limit), "--stream-discard", "old")
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	for i := 1; i <= rows; i++ {
		env.Tx(relaytest.NewRow("order", fmt.Sprint(i), "created", `{}`))
	}
	relaytest.WaitFor(t, relaytest.FaultWait, "the last row stored", func() bool {
		return lastSeq(t, env) == rows
	})
	relaytest.StopRelay(t, relay)
	// Past the 1 s duplicate window: an event published again is stored
	// again.
	time.Sleep(2 * env.DuplicateWindow)
	repair := suite.StartRelay(t, env, "--stream-max-msgs", fmt.Sprint(limit), "--stream-discard", "old", "--recreate-slot")
	repair.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	published, ok := relaytest.LogNumber(repair, "created the replication slot; published the rows the stream needed from the table", "published")
	if !ok || published != 0 {
		t.Errorf("the repair published %v events (logged: %v), want 0: the stream's limits removed them, they were not lacking", published, ok)
	}
	leftOut, ok := relaytest.LogNumber(repair, "left out the rows created at or before the oldest event the stream holds: the stream's limits removed their events, which are not lacking", "left_out")
	if want := rows - limit + 1; !ok || int(leftOut) != want {
		t.Errorf("the repair left out %v rows (logged: %v), want %d", leftOut, ok, want)
	}
	if n := lastSeq(t, env); n != rows {
		t.Errorf("the stream's last sequence is %d after the repair, want %d: it stored events again", n, rows)
	}
	// Rows written after the repair still flow.
	before := lastSeq(t, env)
	env.Tx(relaytest.NewRow("order", "after", "created", `{}`))
	relaytest.WaitFor(t, relaytest.FaultWait, "the row written after the repair stored", func() bool {
		return lastSeq(t, env) == before+1
	})
}

func lastSeq(t *testing.T, env *relaytest.Env) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := env.StreamHandle(10 * time.Second).Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}
