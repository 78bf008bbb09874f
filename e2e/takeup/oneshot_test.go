package takeup

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// TestRepublishDoesNotBlindTheResume: the relay is killed after JetStream
// acknowledged a batch and before it confirmed it to Postgres; then the
// broker loses an older event and `verify --republish` puts it back,
// stamped with the relay's source and commit LSN 0/0, stored after the
// unconfirmed batch. The relay restarts after the stream's 1 s dedup
// window: its tail search must pass over the republished message (marked
// Outbox-Replay) and skip the batch the stream holds. Before the fix the
// message placed the tail after the end of the stream, the relay took the
// stream to hold none of its replay, and stored the whole batch twice.
func TestRepublishDoesNotBlindTheResume(t *testing.T) {
	env := suite.NewEnv(t)
	relay := suite.StartRelay(t, env)
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	older := env.Tx(relaytest.NewRow("order", "o", "older", `{}`))[0]
	env.WaitStored(1, 30*time.Second)
	env.WaitSlotCaughtUp(relaytest.FaultWait)
	relaytest.StopRelay(t, relay)

	killed := suite.KillBeforeConfirm(t, env, nil)
	// Past the window, so that JetStream stores the republished event.
	time.Sleep(2 * env.DuplicateWindow)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := env.StreamHandle(time.Second).DeleteMsg(ctx, relaytest.StoredByID(t, env)[older].Sequence); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"verify", "--republish"}, env.ToolArgs()...)
	if out, err := suite.Relay.RunCLI(t, args...); err != nil || !strings.Contains(out, "OK:") {
		t.Fatalf("verify --republish (%v):\n%s", err, out)
	}
	msgs := relaytest.StreamInOrder(t, env)
	if m := msgs[len(msgs)-1]; m.Header.Get(contract.HeaderMsgID) != older || m.Header.Get(contract.HeaderReplay) != contract.ReplayRepublish {
		t.Fatalf("the stream's last message is not the republished event marked %s: %v", contract.HeaderReplay, m.Header)
	}

	time.Sleep(time.Until(killed.Add(2 * env.DuplicateWindow)))
	relay = suite.StartRelay(t, env)
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	relaytest.RequireLog(t, relay, relaytest.LogSkipStored, 1)
	env.Tx(relaytest.NewRow("order", "y", "after.restart", `{}`))
	finish(t, env, relay, relaytest.Expect{Republished: []string{older}})
}
