package jetstream

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
)

// TestOrderAcrossServerRestart stops JetStream with publishes in flight
// (some stored, their PubAcks lost), keeps offering while it is down, and
// starts it again on the same store after the stream's duplicate window
// has passed: every event ends up stored exactly once, in offer order.
func TestOrderAcrossServerRestart(t *testing.T) {
	t.Run("Plain", func(t *testing.T) { orderAcrossServerRestart(t, 0) })
	// After a crash a clustered stream answers publishes once it has a
	// leader, and reads at times only later. Republishing before the reads
	// answer would store again what the stream held: recovery waits.
	t.Run("ReadsAnswerLate", func(t *testing.T) { orderAcrossServerRestart(t, 3*time.Second) })
}

// unreadable is a stream whose reads (Info, GetMsg) time out until a
// moment; publishing to it is not affected.
type unreadable struct {
	natsjs.Stream
	until atomic.Int64 // Unix nanoseconds; 0: readable
}

func (u *unreadable) blocked(ctx context.Context) error {
	until := u.until.Load()
	if until == 0 || time.Now().UnixNano() >= until {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

func (u *unreadable) Info(ctx context.Context, opts ...natsjs.StreamInfoOpt) (*natsjs.StreamInfo, error) {
	if err := u.blocked(ctx); err != nil {
		return nil, err
	}
	return u.Stream.Info(ctx, opts...)
}

func (u *unreadable) GetMsg(ctx context.Context, seq uint64, opts ...natsjs.GetMsgOpt) (*natsjs.RawStreamMsg, error) {
	if err := u.blocked(ctx); err != nil {
		return nil, err
	}
	return u.Stream.GetMsg(ctx, seq, opts...)
}

// orderAcrossServerRestart: JetStream stops with events stored but not
// acknowledged and the window full, for longer than the dedup window;
// after its restart, for readsLate, reads of the stream time out. Every
// event is stored once, in order.
func orderAcrossServerRestart(t *testing.T, readsLate time.Duration) {
	const dupWindow = 100 * time.Millisecond // JetStream's smallest
	e := newTestEnv(t, natsjs.StreamConfig{Duplicates: dupWindow})
	const window = 64
	stream := &unreadable{Stream: e.stream}
	p := e.publisher(t, Config{Window: window, AckTimeout: time.Second, Stream: stream})
	gate := gateReplies(t, p, gatePass)
	run(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	const acked, stored, total = 250, 300, 1200 // stored-acked < window
	for i := 1; i <= stored; i++ {
		if i == acked+1 {
			waitFor(t, 5*time.Second, "the first events acknowledged", func() bool { return p.AckedThrough() == acked })
			gate.set(gateDrop) // the connection will drop before these PubAcks arrive
		}
		if _, err := p.Publish(ctx, event(i, nil)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "JetStream to store the first events", func() bool { return e.lastSeq(t) == stored })
	inFlight := p.Pending()
	e.stop()
	gate.set(gatePass)
	t.Logf("stopped JetStream with %d of the first %d events unacknowledged", inFlight, stored)

	published := make(chan error, 1)
	go func() {
		for i := stored + 1; i <= total; i++ {
			if _, err := p.Publish(ctx, event(i, nil)); err != nil {
				published <- err
				return
			}
		}
		published <- nil
	}()
	waitFor(t, 5*time.Second, "the window to fill while JetStream is down", func() bool { return p.Pending() == window })
	// Not synchronisation: the outage outlasts the duplicate window, so
	// only the publisher can keep events stored before it from repeating.
	time.Sleep(2 * dupWindow)
	if readsLate > 0 {
		stream.until.Store(time.Now().Add(readsLate).UnixNano())
	}
	e.start(t)
	select {
	case err := <-published:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(8*time.Second + readsLate):
		t.Fatalf("still publishing 8s after the restart: %d events unacknowledged, acknowledged through %d", p.Pending(), p.AckedThrough())
	}
	drain(t, p, 5*time.Second)
	if got := p.AckedThrough(); got != total {
		t.Fatalf("AckedThrough = %d, want %d", got, total)
	}
	got := ids(e.contents(t))
	if want := wantIDs(1, total); !slices.Equal(got, want) {
		t.Fatalf("stream holds %d messages, want the %d events once each in order; first difference at %s", len(got), len(want), firstDiff(got, want))
	}
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("stream position %d: %s instead of %s", i+1, a[i], b[i])
		}
	}
	return fmt.Sprintf("stream position %d", min(len(a), len(b))+1)
}

// TestLateAckAfterTimeout: attempt 1 is stored but its PubAck is late; the
// ack timeout fails it and the probe republishes it; the republish's
// PubAck is lost, and attempt 1's PubAck, arriving after all, settles the
// event. The steps of Run are called directly, the PubAcks held back by a
// gate.
func TestLateAckAfterTimeout(t *testing.T) {
	e := newTestEnv(t, natsjs.StreamConfig{Duplicates: time.Minute})
	// No Stream in the config: recovery must republish, not find the event.
	p := e.publisher(t, Config{AckTimeout: time.Second})
	gate := gateReplies(t, p, gateHold)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if _, ok := p.Offer(event(1, nil)); !ok {
		t.Fatal("Offer refused the first event")
	}
	waitFor(t, 5*time.Second, "attempt 1's PubAck", func() bool { return gate.heldCount() == 1 })
	late := gate.take()[0]

	p.expire(time.Now().Add(2 * time.Second))
	if !p.outage() || p.AckedThrough() != 0 || !p.settled() {
		t.Fatalf("after the ack timeout: outage %v, acked through %d, settled %v; want true, 0, true", p.outage(), p.AckedThrough(), p.settled())
	}

	probed := make(chan bool, 1)
	go func() { probed <- p.probe(ctx, nil, nil) }()
	waitFor(t, 5*time.Second, "the republished attempt's PubAck", func() bool { return gate.heldCount() == 1 })
	if r := parseReply(gate.take()[0]); r.err != nil || !r.duplicate {
		t.Fatalf("republish reply %+v, want a duplicate PubAck", r)
	}
	// That PubAck is lost; attempt 1's comes in late.
	p.onReply(late)
	select {
	case ok := <-probed:
		if !ok {
			t.Fatal("probe reports failure after the late PubAck")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the late PubAck of attempt 1 did not settle the event")
	}
	if got := p.AckedThrough(); got != 1 {
		t.Fatalf("AckedThrough = %d, want 1", got)
	}

	p.resume(1, 0)
	gate.open()
	if _, ok := p.Offer(event(2, nil)); !ok {
		t.Fatal("Offer refused the second event")
	}
	waitFor(t, 5*time.Second, "event 2 acknowledged", func() bool { return p.AckedThrough() == 2 })
	if got, want := ids(e.contents(t)), wantIDs(1, 2); !slices.Equal(got, want) {
		t.Fatalf("stream holds %v, want %v", got, want)
	}
}

// TestDeadLetterWhileNextFlow: an event that can never be stored as it is
// goes to the dead-letter subject, is recorded (before it counts as
// acknowledged), and the events after it are stored in order.
func TestDeadLetterWhileNextFlow(t *testing.T) {
	const bad, total, limit = 5, 20, 2048
	big := bytes.Repeat([]byte("x"), 2*limit)
	cases := []struct {
		name    string
		knownTo bool // the publisher knows the stream's limit
		ev      *decode.Event
		reason  string
	}{
		{"larger than the limit the publisher knows", true, event(bad, big), "larger than the 2048 bytes"},
		{"refused by the stream as too large", false, event(bad, big), "message size exceeds maximum"},
		{"a row the relay cannot publish", true, func() *decode.Event {
			ev := event(bad, nil)
			ev.Problem = "aggregate_id is NULL"
			return ev
		}(), "aggregate_id is NULL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newTestEnv(t, natsjs.StreamConfig{Duplicates: time.Minute, MaxMsgSize: limit})
			type record struct {
				id, reason string
				acked      uint64
			}
			var mu sync.Mutex
			var records []record
			var p *Publisher
			cfg := Config{Window: 8, AckTimeout: 2 * time.Second, Stream: e.stream,
				RecordDeadLetter: func(_ context.Context, ev *decode.Event, _, reason string) error {
					mu.Lock()
					defer mu.Unlock()
					records = append(records, record{ev.ID, reason, p.AckedThrough()})
					return nil
				}}
			if c.knownTo {
				cfg.MaxMessageSize = limit
			}
			p = e.publisher(t, cfg)
			run(t, p)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for i := 1; i <= total; i++ {
				ev := event(i, nil)
				if i == bad {
					ev = c.ev
				}
				if _, err := p.Publish(ctx, ev); err != nil {
					t.Fatal(err)
				}
			}
			drain(t, p, 10*time.Second)
			if got := p.AckedThrough(); got != total {
				t.Fatalf("AckedThrough = %d, want %d", got, total)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(records) != 1 || records[0].id != c.ev.ID || !strings.Contains(records[0].reason, c.reason) || records[0].acked >= bad {
				t.Fatalf("dead letters recorded: %+v; want one for %s with a reason containing %q, before it counted as acknowledged", records, c.ev.ID, c.reason)
			}
			var events, dead []string
			for _, m := range e.contents(t) {
				if m.subject == testDeadLetter {
					dead = append(dead, m.id)
					if r := m.header.Get(contract.HeaderDeadLetterReason); !strings.Contains(r, c.reason) {
						t.Errorf("dead letter's reason header %q, want it to contain %q", r, c.reason)
					}
					continue
				}
				events = append(events, m.id)
			}
			want := slices.Concat(wantIDs(1, bad-1), wantIDs(bad+1, total))
			if !slices.Equal(events, want) {
				t.Errorf("events stored %v, want %v", events, want)
			}
			if wantDead := []string{contract.DeadLetterMsgIDPrefix + c.ev.ID}; !slices.Equal(dead, wantDead) {
				t.Errorf("dead letters stored %v, want %v", dead, wantDead)
			}
		})
	}
}

// TestWindowCount: with Window events awaiting their PubAck, Offer refuses
// and Publish waits; acknowledgements make room again.
func TestWindowCount(t *testing.T) {
	e := newTestEnv(t, natsjs.StreamConfig{})
	const window = 3 // the ring holds 4: the bound is Window, not the ring
	p := e.publisher(t, Config{Window: window})
	gate := gateReplies(t, p, gateHold)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	for i := 1; i <= window; i++ {
		if _, ok := p.Offer(event(i, nil)); !ok {
			t.Fatalf("Offer refused event %d of a window of %d", i, window)
		}
	}
	if _, ok := p.Offer(event(window+1, nil)); ok {
		t.Fatalf("Offer accepted event %d with %d in flight", window+1, window)
	}
	select {
	case <-p.Room():
		t.Fatal("Room signalled with the window full")
	default:
	}
	published := make(chan error, 1)
	go func() {
		_, err := p.Publish(ctx, event(window+1, nil))
		published <- err
	}()
	waitFor(t, 5*time.Second, "the PubAcks of the window", func() bool { return gate.heldCount() == window })
	select {
	case err := <-published:
		t.Fatalf("Publish returned (%v) with the window full", err)
	case <-time.After(100 * time.Millisecond):
	}
	gate.open()
	select {
	case err := <-published:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Publish still waiting after the window was acknowledged")
	}
	drain(t, p, 5*time.Second)
	if got := p.AckedThrough(); got != window+1 {
		t.Fatalf("AckedThrough = %d, want %d", got, window+1)
	}
	if got, want := ids(e.contents(t)), wantIDs(1, window+1); !slices.Equal(got, want) {
		t.Fatalf("stream holds %v, want %v", got, want)
	}
}

// TestWindowBytes: Offer refuses an event whose payload would take the
// bytes awaiting PubAcks over WindowBytes; a larger event still goes when
// it is alone; acknowledgements give the bytes back.
func TestWindowBytes(t *testing.T) {
	e := newTestEnv(t, natsjs.StreamConfig{})
	const windowBytes = 1000
	p := e.publisher(t, Config{Window: 100, WindowBytes: windowBytes})
	gate := gateReplies(t, p, gateHold)
	payload := func(n int) []byte { return bytes.Repeat([]byte("x"), n) }
	// release delivers the PubAcks of n events and waits for the room.
	release := func(n int, through uint64) {
		t.Helper()
		waitFor(t, 5*time.Second, "PubAcks", func() bool { return gate.heldCount() == n })
		for _, m := range gate.take() {
			p.onReply(m)
		}
		select {
		case <-p.Room():
		case <-time.After(5 * time.Second):
			t.Fatal("Room not signalled after the PubAcks")
		}
		if got := p.AckedThrough(); got != through {
			t.Fatalf("AckedThrough = %d, want %d", got, through)
		}
	}

	for i := 1; i <= 2; i++ {
		if _, ok := p.Offer(event(i, payload(400))); !ok {
			t.Fatalf("Offer refused event %d with %d bytes in flight", i, (i-1)*400)
		}
	}
	if _, ok := p.Offer(event(3, payload(400))); ok {
		t.Fatal("Offer accepted 400 bytes with 800 of 1000 in flight")
	}
	release(2, 2)

	if _, ok := p.Offer(event(3, payload(1500))); !ok {
		t.Fatal("Offer refused a message over WindowBytes with nothing in flight")
	}
	if _, ok := p.Offer(event(4, payload(10))); ok {
		t.Fatal("Offer accepted a message next to one over WindowBytes")
	}
	release(1, 3)

	// The acknowledged bytes are given back: two 400-byte events fit again.
	for i := 4; i <= 5; i++ {
		if _, ok := p.Offer(event(i, payload(400))); !ok {
			t.Fatalf("Offer refused event %d after the window was acknowledged", i)
		}
	}
	if _, ok := p.Offer(event(6, payload(400))); ok {
		t.Fatal("Offer accepted 400 bytes with 800 of 1000 in flight")
	}
	gate.open()
	drain(t, p, 5*time.Second)
	if got, want := ids(e.contents(t)), wantIDs(1, 5); !slices.Equal(got, want) {
		t.Fatalf("stream holds %v, want %v", got, want)
	}
}
