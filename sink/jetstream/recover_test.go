package jetstream

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
)

// The tests here cover what recovery does while it waits (awaitEvent):
// in-flight publishes time out, connection changes fail what was on the
// wire, and dead letters stored meanwhile are recorded.

// TestRecoveryProbeAckLost: the first event's PubAck is lost, and so is
// the PubAck of the probe that republishes it during recovery. The probe
// must time out like any publish and be sent again, not wait forever.
func TestRecoveryProbeAckLost(t *testing.T) {
	e := newTestEnv(t, natsjs.StreamConfig{Duplicates: time.Minute})
	// No Stream in the config: recovery must republish, not find the event.
	p := e.publisher(t, Config{Window: 8, AckTimeout: time.Second})
	gate := gateReplies(t, p, gateDrop)
	run(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	publishRange(ctx, t, p, 1, 1)
	// Attempt 1's PubAck is lost; it times out, and recovery's probe
	// (attempt 2) loses its PubAck too.
	waitFor(t, 10*time.Second, "the probe's PubAck lost", func() bool { return gate.droppedCount() == 2 })
	gate.set(gatePass)
	publishRange(ctx, t, p, 2, 3) // queued behind the outage

	drain(t, p, 10*time.Second)
	if got, want := ids(e.contents(t)), wantIDs(1, 3); !slices.Equal(got, want) {
		t.Fatalf("stream holds %v, want %v", got, want)
	}
}

// TestRecoveryConnectionDropsDuringProbe: the connection drops while the
// probe of recovery waits for its PubAck (stored, the PubAck lost), longer
// than the stream's duplicate window after the probe was stored. The probe
// fails at once, and recovery reads the stream again after the reconnect,
// finds the event there and does not send it again (a copy would be
// stored twice); it does not wait for the ack timeout (long here, and so
// are its ticks).
func TestRecoveryConnectionDropsDuringProbe(t *testing.T) {
	const dupWindow = 100 * time.Millisecond // JetStream's smallest
	e := newTestEnv(t, natsjs.StreamConfig{Duplicates: dupWindow})
	const ackTimeout = 5 * time.Minute // ticks every 30s
	p := e.publisher(t, Config{Window: 8, AckTimeout: ackTimeout, Stream: e.stream})
	gate := gateReplies(t, p, gatePass)
	run(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	publishRange(ctx, t, p, 1, 3)
	waitFor(t, 5*time.Second, "events 1..3 acknowledged", func() bool { return p.AckedThrough() == 3 })
	// Event 4 is lost on the way; the connection drops and recovery finds
	// it missing from the stream, so it probes with it on the new one.
	gate.set(gateDrop)
	e.dialer.blackhole()
	publishRange(ctx, t, p, 4, 4)
	waitFor(t, 5*time.Second, "event 4 written to the lost connection", func() bool { return e.dialer.swallowed(event(4, nil).ID) })
	e.dialer.drop()
	// The probe is stored; its PubAck is lost with the next connection.
	waitFor(t, 10*time.Second, "the probe's PubAck lost", func() bool { return gate.droppedCount() == 1 })
	if got := e.lastSeq(t); got != 4 {
		t.Fatalf("stream's last sequence %d after the probe, want 4", got)
	}
	// Not synchronisation: the PubAck's loss outlasts the duplicate
	// window, so only recovery's read of the stream can keep event 4 from
	// being stored twice.
	time.Sleep(2 * dupWindow)
	gate.set(gatePass)
	dropped := time.Now()
	e.dialer.drop()
	publishRange(ctx, t, p, 5, 6) // queued behind the outage

	drain(t, p, 10*time.Second) // a third of the tick interval
	t.Logf("recovered %s after the connection dropped during the probe", time.Since(dropped).Round(time.Millisecond))
	if got, want := ids(e.contents(t)), wantIDs(1, 6); !slices.Equal(got, want) {
		t.Fatalf("stream holds %v, want %v", got, want)
	}
}

// TestDeadLetterRecordedDuringOutage: the stream is full and refuses a
// dead letter and the event after it. Once it has room for one message,
// the dead letter is stored and must be recorded (and count as
// acknowledged) at once, though the event after it is still refused and
// the outage goes on.
func TestDeadLetterRecordedDuringOutage(t *testing.T) {
	const full, dead, last = 5, 6, 7
	e := newTestEnv(t, natsjs.StreamConfig{Duplicates: time.Minute, MaxMsgs: full, Discard: natsjs.DiscardNew})
	var mu sync.Mutex
	var recorded []string
	p := e.publisher(t, Config{Window: 8, AckTimeout: time.Second, Stream: e.stream,
		RecordDeadLetter: func(_ context.Context, ev *decode.Event, _, _ string) error {
			mu.Lock()
			defer mu.Unlock()
			recorded = append(recorded, ev.ID)
			return nil
		}})
	run(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	records := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(recorded)
	}
	setMaxMsgs := func(n int64) {
		t.Helper()
		cfg := e.stream.CachedInfo().Config
		cfg.MaxMsgs = n
		if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}

	publishRange(ctx, t, p, 1, full)
	waitFor(t, 5*time.Second, "the stream filled", func() bool { return p.AckedThrough() == full })
	publishRange(ctx, t, p, dead, last, dead)
	waitFor(t, 5*time.Second, "the full stream to refuse the dead letter", func() bool { return p.outage() })
	setMaxMsgs(full + 1)

	waitFor(t, 20*time.Second, "the dead letter recorded while the next event is refused", func() bool {
		return p.AckedThrough() == dead
	})
	if got, want := records(), []string{event(dead, nil).ID}; !slices.Equal(got, want) {
		t.Fatalf("dead letters recorded %v, want %v", got, want)
	}
	// Recovery may end for a moment after the dead letter, until the
	// event after it is refused again.
	waitFor(t, 10*time.Second, "the full stream to refuse the event after the dead letter", func() bool { return p.outage() })
	if got := e.lastSeq(t); got != dead {
		t.Fatalf("stream's last sequence %d, want %d", got, dead)
	}

	setMaxMsgs(-1)
	drain(t, p, 20*time.Second)
	want := slices.Concat(wantIDs(1, full), []string{contract.DeadLetterMsgIDPrefix + event(dead, nil).ID}, wantIDs(last, last))
	if got := ids(e.contents(t)); !slices.Equal(got, want) {
		t.Fatalf("stream holds %v, want %v", got, want)
	}
	if got := records(); len(got) != 1 {
		t.Fatalf("dead letters recorded %v, want one", got)
	}
}

// TestRecoveryProbeOfAnEventStoredLate: an event's first attempt reaches
// the stream only after recovery read it (its PubAck timed out while the
// message was still on its way), and recovery's probe of that event goes
// out past the duplicate window. The probe carries the subject's last
// sequence as recovery read it: JetStream refuses it, recovery reads the
// stream again, finds the event and does not store it twice.
func TestRecoveryProbeOfAnEventStoredLate(t *testing.T) {
	const dupWindow = 100 * time.Millisecond // JetStream's smallest
	e := newTestEnv(t, natsjs.StreamConfig{Duplicates: dupWindow})
	p := e.publisher(t, Config{Window: 8, AckTimeout: time.Second, Stream: e.stream})
	var probes atomic.Int32
	p.beforeProbe = func(ev *decode.Event) {
		if probes.Add(1) > 1 || ev.ID != event(1, nil).ID {
			return
		}
		// The first attempt lands now, after recovery's read; then the
		// window passes before the probe goes out.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := e.js.PublishMsg(ctx, EventMsg(ev, p.cfg.Subject.Render(ev))); err != nil {
			t.Errorf("store the late first attempt: %v", err)
		}
		time.Sleep(3 * dupWindow) // Not synchronisation: the window must pass.
	}
	run(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The first attempt is lost on the way (the test stores it late).
	e.dialer.blackhole()
	publishRange(ctx, t, p, 1, 1)
	waitFor(t, 5*time.Second, "event 1 written to the lost connection", func() bool { return e.dialer.swallowed(event(1, nil).ID) })
	e.dialer.mu.Lock()
	for _, c := range e.dialer.conns {
		c.blackhole.Store(false)
	}
	e.dialer.mu.Unlock()

	waitFor(t, 20*time.Second, "recovery's probe", func() bool { return probes.Load() >= 1 })
	publishRange(ctx, t, p, 2, 3)
	drain(t, p, 20*time.Second)
	if got, want := ids(e.contents(t)), wantIDs(1, 3); !slices.Equal(got, want) {
		t.Fatalf("stream holds %v, want %v", got, want)
	}
}
