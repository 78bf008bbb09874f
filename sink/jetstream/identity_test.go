package jetstream

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/sink"
)

// The sources of the identity tests: relay B is the relay under test,
// relay A another one publishing to the same stream with the same
// template, from another cluster whose WAL positions overlap B's.
var (
	relayB = sink.Source{System: "7301234567890123456", Timeline: 1, Slot: "outbox_relay", Origin: 0x100}
	relayA = sink.Source{System: "7309999999999999999", Timeline: 1, Slot: "outbox_relay", Origin: 0x80}
)

// crafted is a message as a relay with src (none when zero) publishes it.
type crafted struct {
	id   string
	at   decode.Position
	src  sink.Source
	dead bool
}

// msg builds the message.
func (c crafted) msg() *nats.Msg {
	ev := &decode.Event{ID: c.id, AggregateType: "order", AggregateID: "1", EventType: "created",
		CreatedAt: "2024-05-01T10:00:00Z", Payload: []byte(`{}`), Position: c.at}
	m := EventMsg(ev, "outbox.order.created")
	if c.dead {
		m.Subject = testDeadLetter
		m.Header.Set(contract.HeaderMsgID, contract.DeadLetterMsgIDPrefix+c.id)
	}
	if !c.src.IsZero() {
		SetSourceHeaders(m.Header, c.src)
	}
	return m
}

// put stores the messages, in order, each acknowledged.
func put(t *testing.T, js natsjs.JetStream, msgs ...crafted) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range msgs {
		if _, err := js.PublishMsg(ctx, c.msg()); err != nil {
			t.Fatalf("publish %s: %v", c.id, err)
		}
	}
}

func at(lsn pglogrepl.LSN, i uint32) decode.Position {
	return decode.Position{CommitLSN: lsn, Index: i}
}

// readTail returns what ReadTail reads for relay src from from.
func readTail(t *testing.T, tail Tail) []sink.StoredEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []sink.StoredEvent
	if err := ReadTail(ctx, tail, func(ev sink.StoredEvent) { got = append(got, ev) }); err != nil {
		t.Fatal(err)
	}
	return got
}

func describe(evs []sink.StoredEvent) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = fmt.Sprintf("%s@%s", ev.ID, ev.Position)
		if ev.DeadLetter {
			out[i] += "(dead)"
		}
	}
	return out
}

// TestReadTailOnlyItsSlot: two relays publish to one stream with the same
// template, and their commit positions overlap. Relay B stored b1 at
// 0/300#0 and died before its next event (0/300#1) was stored; relay A
// stored its own event at 0/300#1. When B's slot replays, B must publish
// its event: the tail it reads holds only its own slot's messages, and
// the skip needs the id at the position too. Before the fix, the tail held
// A's message, an older relay's and an earlier slot's, and B skipped its
// unsent event.
func TestReadTailOnlyItsSlot(t *testing.T) {
	e := newTestEnv(t, natsjs.StreamConfig{})
	earlierSlot := relayB
	earlierSlot.Origin = 0x40
	newTimeline := relayB
	newTimeline.Timeline = 2
	put(t, e.js,
		crafted{"b-old", at(0x200, 0), relayB, false},         // confirmed: before the tail
		crafted{"b1", at(0x300, 0), relayB, false},            // B's, stored
		crafted{"a1", at(0x300, 1), relayA, false},            // A's, at B's unsent event's position
		crafted{"slot-1", at(0x300, 2), earlierSlot, false},   // B's slot before it was recreated
		crafted{"legacy", at(0x300, 3), sink.Source{}, false}, // a relay without source headers
		crafted{"b-dead", at(0x300, 4), relayB, true},         // B's dead letter
		crafted{"a-dead", at(0x300, 5), relayA, true},         // A's dead letter
		crafted{"b2", at(0x400, 0), newTimeline, false},       // B's, after a promotion
		crafted{"a2", at(0x500, 0), relayA, false},            // A's, later
	)
	tail := Tail{Stream: e.stream, Subject: "outbox.>", DeadLetterSubject: testDeadLetter, From: 0x300, Source: relayB}
	got := describe(readTail(t, tail))
	want := []string{"b1@0/300#0", "b-dead@0/300#4(dead)", "b2@0/400#0"}
	if !slices.Equal(got, want) {
		t.Fatalf("relay B's tail holds %v, want %v", got, want)
	}

	// What B skips when its slot replays 0/300: only its own stored events,
	// at their position with their id.
	var stored checkpoint.Stored
	for _, ev := range readTail(t, tail) {
		stored.Add(ev.Position, ev.ID)
	}
	for _, c := range []struct {
		id   string
		p    decode.Position
		skip bool
	}{
		{"b1", at(0x300, 0), true},
		{"b-unsent", at(0x300, 1), false}, // A's a1 is stored there
		{"b-unsent-2", at(0x300, 3), false},
		{"b-dead", at(0x300, 4), true},
		{"b-other", at(0x400, 0), false}, // the position is b2's, the id is not
		{"b2", at(0x400, 0), true},
	} {
		if got := stored.Holds(c.p, c.id); got != c.skip {
			t.Errorf("replayed %s at %s: skipped %v, want %v", c.id, c.p, got, c.skip)
		}
	}

	// Relay A reads back only its own messages from the same stream.
	got = describe(readTail(t, Tail{Stream: e.stream, Subject: "outbox.>", DeadLetterSubject: testDeadLetter, From: 0x300, Source: relayA}))
	if want := []string{"a1@0/300#1", "a-dead@0/300#5(dead)", "a2@0/500#0"}; !slices.Equal(got, want) {
		t.Errorf("relay A's tail holds %v, want %v", got, want)
	}
	// Without its slot's creation point a relay trusts nothing.
	unknown := relayB
	unknown.Origin = 0
	if got := readTail(t, Tail{Stream: e.stream, Subject: "outbox.>", DeadLetterSubject: testDeadLetter, From: 0x300, Source: unknown}); len(got) != 0 {
		t.Errorf("a relay without its creation point read back %v", describe(got))
	}
}

// TestLastEventOfThisRelay: at start the relay counts the messages it
// published; in a stream shared with another relay it finds its newest
// one behind the other's, and a stream holding only the other's holds none
// of its own. Messages of older relays (no source) count: they may be its
// own, and the count only makes the relay refuse to start over a gap.
func TestLastEventOfThisRelay(t *testing.T) {
	e := newTestEnv(t, natsjs.StreamConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mine := sink.Source{System: relayB.System, Timeline: 3, Slot: relayB.Slot}

	put(t, e.js, crafted{"a0", at(0x10, 0), relayA, false})
	if last, err := LastEvent(ctx, e.stream, mine, "outbox.>", testDeadLetter); err != nil || last != nil {
		t.Fatalf("a stream holding only another relay's message: last %+v, %v", last, err)
	}
	put(t, e.js, crafted{"b1", at(0x20, 0), relayB, false})
	// Far more of A's messages than one read back covers.
	for i := 0; i < 2500; i++ {
		if err := e.nc.PublishMsg(crafted{fmt.Sprintf("a%d", i+1), at(0x30, uint32(i)), relayA, false}.msg()); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "A's messages stored", func() bool { return e.lastSeq(t) == 2502 })
	last, err := LastEvent(ctx, e.stream, mine, "outbox.>", testDeadLetter)
	if err != nil || last == nil || last.ID != "b1" || last.Seq != 2 {
		t.Fatalf("relay B's last event %+v, %v; want b1 at 2", last, err)
	}
	if last, err := LastEvent(ctx, e.stream, sink.Source{}, "outbox.>"); err != nil || last == nil || last.ID != "a2500" {
		t.Fatalf("without a source, the last relay message is %+v, %v; want a2500", last, err)
	}
	put(t, e.js, crafted{"legacy", at(0x40, 0), sink.Source{}, true})
	if last, err := LastEvent(ctx, e.stream, mine, "outbox.>", testDeadLetter); err != nil || last == nil || last.ID != "legacy" {
		t.Fatalf("a message of an older relay does not count: %+v, %v", last, err)
	}
}

// TestPublisherStampsSource: a Publisher with Config.Source stamps every
// message, and a source set later (the slot's creation point) reaches the
// messages written from then on.
func TestPublisherStampsSource(t *testing.T) {
	e := newTestEnv(t, natsjs.StreamConfig{})
	src := relayB
	src.Origin = 0
	stamp := sink.NewStamp(src)
	p := e.publisher(t, Config{Stream: e.stream, Source: stamp})
	run(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	snapshotRow := event(1, nil)
	snapshotRow.Position = decode.Position{}
	if _, err := p.Publish(ctx, snapshotRow); err != nil {
		t.Fatal(err)
	}
	drain(t, p, 5*time.Second)
	stamp.Set(relayB)
	poison := event(3, nil)
	poison.Problem = "aggregate_id is NULL"
	for _, ev := range []*decode.Event{event(2, nil), poison} {
		if _, err := p.Publish(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	drain(t, p, 5*time.Second)
	msgs := e.contents(t)
	if len(msgs) != 3 {
		t.Fatalf("stream holds %d messages, want 3", len(msgs))
	}
	for i, want := range []sink.Source{src, relayB, relayB} {
		ev, ok := ParseStored(&natsjs.RawStreamMsg{Header: msgs[i].header})
		if !ok || ev.Source != want {
			t.Errorf("message %d (%s) has source %+v, want %+v", i+1, msgs[i].id, ev.Source, want)
		}
	}
}
