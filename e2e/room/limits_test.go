package room

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"
)

// TestNoRoomMaxBytes: an operator's stream with max_bytes and discard
// new fills up under load. The relay holds the events, names max_bytes and
// `nats stream edit --max-bytes`, survives a SIGKILL while the stream is
// full, and stores every event once after the stream is enlarged.
func TestNoRoomMaxBytes(t *testing.T) {
	t.Parallel()
	env := suite.NewEnv(t)
	createStream(t, env, jetstream.StreamConfig{MaxBytes: 256 << 10})
	flags := []string{"--ack-timeout", "2s"}
	relay := suite.StartRelay(t, env, flags...)
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	w, stop := relaytest.Load(t, env)
	fix := fmt.Sprintf("nats stream edit %s --max-bytes", env.Stream)
	b := waitBlocked(t, env, relay, 0, jssink.RoomMaxBytes, fix, true)
	relay = b.killWhileBlocked(t, relay, fix, flags...)
	updateStream(t, env, func(c *jetstream.StreamConfig) { c.MaxBytes = -1 })
	b.requireRoomAgain(t, relay)
	// A message smaller than the one refused may still fit: the
	// documented reordering (docs/guarantees.md), counted and logged.
	settle(t, env, relay, w, stop, relaytest.Expect{Reordered: true})
}

// TestNoRoomLimitsLowered: the relay created the stream (no limits); under
// load an operator lowers max_msgs below what the stream holds, later
// max_bytes to what it holds. Each time the relay holds the events, names
// the limit, and goes on by itself once it is raised again.
func TestNoRoomLimitsLowered(t *testing.T) {
	t.Parallel()
	env := suite.NewEnv(t)
	relay := suite.StartRelay(t, env, "--ack-timeout", "2s")
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	w, stop := relaytest.Load(t, env)
	w.WaitTx(t, 30, relaytest.FaultWait)

	relaytest.InFlight(t, env, relay, 1000)
	from := blocks(relay)
	updateStream(t, env, func(c *jetstream.StreamConfig) { c.MaxMsgs = int64(env.CountStored() / 2) })
	b := waitBlocked(t, env, relay, from, jssink.RoomMaxMsgs, fmt.Sprintf("nats stream edit %s --max-msgs", env.Stream), true)
	updateStream(t, env, func(c *jetstream.StreamConfig) { c.MaxMsgs = -1 })
	b.requireRoomAgain(t, relay)

	w.WaitTx(t, 30, relaytest.FaultWait)
	relaytest.InFlight(t, env, relay, 1000)
	from = blocks(relay)
	updateStream(t, env, func(c *jetstream.StreamConfig) {
		c.MaxBytes = int64(streamBytes(t, env))
	})
	b = waitBlocked(t, env, relay, from, jssink.RoomMaxBytes, fmt.Sprintf("nats stream edit %s --max-bytes", env.Stream), true)
	time.Sleep(2 * env.DuplicateWindow) // the block outlasts the duplicate window
	updateStream(t, env, func(c *jetstream.StreamConfig) { c.MaxBytes = -1 })
	b.requireRoomAgain(t, relay)
	settle(t, env, relay, w, stop, relaytest.Expect{})
}

// streamBytes is the size of what the stream holds now.
func streamBytes(t *testing.T, env *relaytest.Env) uint64 {
	t.Helper()
	info, err := env.StreamHandle(10 * time.Second).Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Bytes
}
