package room

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// The "no room" cases: the stream cannot store the relay's next event for
// a while, whatever the event: a stream limit (max_bytes, max_msgs, also
// lowered by an operator while the relay runs), the account's JetStream
// quota, a clustered stream that lost its quorum. In each the relay holds
// the events (never a dead letter), confirms nothing past the one it
// holds, names the limit and the nats command that frees it in its log,
// in `status` and in outbox_relay_stream_blocked{stream,reason}, survives
// a SIGKILL while blocked, and resumes by itself once there is room; the
// stream then holds every committed event once (1 s duplicate window,
// blocks held far past it). A package of their own: each waits through a
// block, and e2e/outages would pass three minutes.

// suite is the relay binary built for these tests, their Postgres, and
// this test binary re-executed as NATS child processes.
var suite relaytest.Suite

// TestMain serves NATS when this is such a child, else builds the relay.
func TestMain(m *testing.M) { relaytest.RunWithBuiltRelay(m, &suite) }
