package jetstream

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
)

// TestOrderAcrossReconnect: the connection drops with messages in flight
// (the first ones stored with their PubAcks lost, the later ones lost on
// the way) and the client reconnects before Run notices: Run is busy
// recording a dead letter in Postgres. Events offered on the new
// connection must not be stored ahead of the lost ones, and the stored
// ones, whose PubAcks were lost longer than the stream's duplicate window
// ago, must not be sent again: the stream holds every event once, in
// offer order.
func TestOrderAcrossReconnect(t *testing.T) {
	const dupWindow = 100 * time.Millisecond // JetStream's smallest
	e := newTestEnv(t, natsjs.StreamConfig{Duplicates: dupWindow})
	recording := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	p := e.publisher(t, Config{Window: 64, AckTimeout: 5 * time.Second, Stream: e.stream,
		RecordDeadLetter: func(ctx context.Context, _ *decode.Event, _, _ string) error {
			once.Do(func() { close(recording) })
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}})
	gate := gateReplies(t, p, gatePass)
	run(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	publish := func(from, to int) { t.Helper(); publishRange(ctx, t, p, from, to, 1) }

	// Event 1 is a dead letter: Run waits in RecordDeadLetter until release.
	publish(1, 1)
	select {
	case <-recording:
	case <-time.After(5 * time.Second):
		t.Fatal("the dead letter was not recorded")
	}

	// 2..10 are stored; their PubAcks will be lost with the connection.
	gate.set(gateHold)
	publish(2, 10)
	waitFor(t, 5*time.Second, "the PubAcks of events 2..10", func() bool { return gate.heldCount() == 9 })
	// 11..20 are lost on the way.
	e.dialer.blackhole()
	publish(11, 20)
	waitFor(t, 5*time.Second, "event 20 written to the lost connection", func() bool { return e.dialer.swallowed(event(20, nil).ID) })
	gate.take()
	gate.set(gatePass)

	// The connection drops and the client reconnects at once.
	before := e.nc.Stats().Reconnects
	e.dialer.drop()
	waitFor(t, 5*time.Second, "the client to reconnect", func() bool {
		return e.nc.IsConnected() && e.nc.Stats().Reconnects > before
	})

	// 21..30 are offered on the new connection before Run has noticed.
	publish(21, 30)
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Not synchronisation: the outage outlasts the duplicate window, so
	// only recovery's read of the stream can keep 2..10 from being stored
	// twice.
	time.Sleep(2 * dupWindow)
	close(release)

	drain(t, p, 10*time.Second)
	if got := p.AckedThrough(); got != 30 {
		t.Fatalf("AckedThrough = %d, want 30", got)
	}
	got := ids(e.contents(t))
	want := slices.Concat([]string{contract.DeadLetterMsgIDPrefix + event(1, nil).ID}, wantIDs(2, 30))
	if !slices.Equal(got, want) {
		t.Fatalf("stream holds %v\nwant %v\nfirst difference at %s", got, want, firstDiff(got, want))
	}
}
