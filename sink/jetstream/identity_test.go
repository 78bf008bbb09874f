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
	relayB = sink.Source{System: "7301234567890123456", Timeline: 1, Slot: "outbox_relay", Origin: 0x100,
		Database: "app", Table: "public.outbox_events"}
	relayA = sink.Source{System: "7309999999999999999", Timeline: 1, Slot: "outbox_relay", Origin: 0x80,
		Database: "app", Table: "public.outbox_events"}
)

// crafted is a message as a relay with src (none when zero) publishes it;
// replay marks it published again by hand (contract.HeaderReplay).
type crafted struct {
	id     string
	at     decode.Position
	src    sink.Source
	dead   bool
	replay string
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
	if c.replay != "" {
		m.Header.Set(contract.HeaderReplay, c.replay)
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

// TestReadTailOnlyItsTable: relays of two clusters (whose commit
// positions overlap) and of two tables publish to one stream with the same
// template. Relay B stored b1 at 0/300#0 and died before its next event
// (0/300#1) was stored; relay A of another cluster stored its own event
// there. When B's slot replays, B must publish its event: the tail holds
// only messages of B's table from B's cluster, whichever slot of it
// published them (an earlier slot of the same name, a renamed one, a row
// another slot's take-up published from the table, a republish by hand),
// and the skip needs the id at the position too (or, for a message
// without a position, the id). Before identity went by the table, the
// tail held only B's very slot's messages, and a slot resumed after
// another one streamed the table published that one's events again.
func TestReadTailOnlyItsTable(t *testing.T) {
	e := newTestEnv(t, natsjs.StreamConfig{})
	earlierSlot := relayB
	earlierSlot.Origin = 0x40
	renamed := relayB
	renamed.Slot, renamed.Origin = "outbox_relay_v2", 0x280
	olderRelay := relayB // an older relay: no table headers, its slot's name tells
	olderRelay.Database, olderRelay.Table = "", ""
	olderOther := olderRelay
	olderOther.Slot = "another_slot"
	otherTable := relayB
	otherTable.Slot, otherTable.Table = "outbox2_relay", "public.outbox2"
	otherDatabase := relayB
	otherDatabase.Slot, otherDatabase.Database = "billing_relay", "billing"
	newTimeline := relayB
	newTimeline.Timeline = 2
	put(t, e.js,
		crafted{id: "b-old", at: at(0x200, 0), src: relayB},              // confirmed: before the tail
		crafted{id: "b1", at: at(0x300, 0), src: relayB},                 // B's, stored
		crafted{id: "a1", at: at(0x300, 1), src: relayA},                 // another cluster's, at B's unsent event's position
		crafted{id: "slot-1", at: at(0x300, 2), src: earlierSlot},        // B's slot before it was recreated
		crafted{id: "legacy", at: at(0x300, 3), src: sink.Source{}},      // a relay without source headers
		crafted{id: "b-dead", at: at(0x300, 4), src: relayB, dead: true}, // B's dead letter
		crafted{id: "a-dead", at: at(0x300, 5), src: relayA, dead: true}, // A's dead letter
		crafted{id: "v2-1", at: at(0x300, 6), src: renamed},              // another slot of B's table
		crafted{id: "old-1", at: at(0x300, 7), src: olderRelay},          // B's slot, by an older relay
		crafted{id: "old-2", at: at(0x300, 8), src: olderOther},          // another slot, by an older relay: table unknown
		crafted{id: "t2-1", at: at(0x300, 9), src: otherTable},           // another table of B's database
		crafted{id: "db-1", at: at(0x300, 10), src: otherDatabase},       // the same table name in another database
		crafted{id: "v2-row", at: at(0, 0), src: sink.Source{System: renamed.System, Timeline: 1, Slot: renamed.Slot, Database: "app", Table: "public.outbox_events"}}, // a row another slot's take-up published
		crafted{id: "t2-row", at: at(0, 1), src: otherTable},                                // another table's row
		crafted{id: "b2", at: at(0x400, 0), src: newTimeline},                               // B's, after a promotion
		crafted{id: "a2", at: at(0x500, 0), src: relayA},                                    // A's, later
		crafted{id: "b-again", at: at(0, 0), src: relayB, replay: contract.ReplayRepublish}, // republished by hand
		crafted{id: "b-copied", at: at(0, 2), src: relayB, replay: contract.ReplayCopy},     // replay's copy, under an id a row could have
	)
	tail := Tail{Stream: e.stream, Subject: "outbox.>", DeadLetterSubject: testDeadLetter, From: 0x300, Source: relayB}
	got := describe(readTail(t, tail))
	want := []string{"b1@0/300#0", "slot-1@0/300#2", "b-dead@0/300#4(dead)", "v2-1@0/300#6", "old-1@0/300#7", "v2-row@0/0#0", "b2@0/400#0", "b-again@0/0#0", "b-copied@0/0#2"}
	if !slices.Equal(got, want) {
		t.Fatalf("relay B's tail holds %v, want %v", got, want)
	}

	// What B skips when its slot replays 0/300: only events of its table
	// the stream holds, at their position with their id, or by id alone
	// for messages published from the table.
	held, err := checkpoint.ReadHoldings(context.Background(), NewReader(e.js, e.stream, "outbox.>", testDeadLetter, sink.NewStamp(relayB)), 0x300)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id   string
		p    decode.Position
		skip bool
	}{
		{"b1", at(0x300, 0), true},
		{"b-unsent", at(0x300, 1), false}, // A's a1 is stored there
		{"slot-1", at(0x300, 2), true},
		{"b-unsent-2", at(0x300, 3), false},
		{"b-dead", at(0x300, 4), true},
		{"v2-1", at(0x300, 6), true},
		{"old-1", at(0x300, 7), true},
		{"old-2", at(0x300, 8), false},
		{"t2-1", at(0x300, 9), false}, // another table's event has this id and position
		{"db-1", at(0x300, 10), false},
		{"v2-row", at(0x380, 0), true}, // by id: the other slot published the row from the table
		{"t2-row", at(0x380, 1), false},
		{"b-other", at(0x400, 0), false}, // the position is b2's, the id is not
		{"b2", at(0x400, 0), true},
		{"b-again", at(0x450, 0), true},
		{"b-copied", at(0x460, 0), false}, // a copy delivers nothing: the event is published
	} {
		ev := &decode.Event{ID: c.id, Position: c.p}
		if got, _ := held.Holds(ev); got != c.skip {
			t.Errorf("replayed %s at %s: skipped %v, want %v", c.id, c.p, got, c.skip)
		}
	}

	// Relay A reads back only its own cluster's messages from the same stream.
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

// TestReadTailPassesOverOneShots: verify --republish and dlq retry stamp
// their messages with the relay's source and commit LSN 0/0, and store
// them after later commits. The tail search must pass over them: taken as
// the relay's rows from before its position, the one at the end made the
// search place the tail after the last message, the relay skipped nothing
// of its replay, and a restart past the duplicate window stored the
// unconfirmed tail twice. Both kinds are recognised: with the
// Outbox-Replay header, and without it (published before it existed) by
// commit LSN 0/0 with the slot's creation point.
func TestReadTailPassesOverOneShots(t *testing.T) {
	for name, last := range map[string]crafted{
		"marked":   {id: "again", at: at(0, 0), src: relayB, replay: contract.ReplayRetry},
		"unmarked": {id: "again", at: at(0, 0), src: relayB},
		"copy":     {id: "again", at: at(0, 0), src: relayB, replay: contract.ReplayCopy}, // by replay, into the relay's stream
	} {
		t.Run(name, func(t *testing.T) {
			e := newTestEnv(t, natsjs.StreamConfig{})
			var msgs []crafted
			for i := 0; i < 40; i++ {
				msgs = append(msgs, crafted{id: fmt.Sprintf("e%02d", i), at: at(pglogrepl.LSN(0x1000+0x10*i), 0), src: relayB})
			}
			put(t, e.js, append(msgs, last)...)
			got := readTail(t, Tail{Stream: e.stream, Subject: "outbox.>", DeadLetterSubject: testDeadLetter, From: 0x1000 + 0x10*30, Source: relayB})
			var ids []string
			for _, ev := range got {
				ids = append(ids, ev.ID)
			}
			want := []string{"e30", "e31", "e32", "e33", "e34", "e35", "e36", "e37", "e38", "e39", "again"}
			if !slices.Equal(ids, want) {
				t.Fatalf("the tail from e30's position holds %v, want %v", ids, want)
			}
		})
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

	put(t, e.js, crafted{id: "a0", at: at(0x10, 0), src: relayA})
	if last, err := LastEvent(ctx, e.stream, mine, "outbox.>", testDeadLetter); err != nil || last != nil {
		t.Fatalf("a stream holding only another relay's message: last %+v, %v", last, err)
	}
	put(t, e.js, crafted{id: "b1", at: at(0x20, 0), src: relayB})
	// Far more of A's messages than one read back covers.
	for i := 0; i < 2500; i++ {
		if err := e.nc.PublishMsg(crafted{id: fmt.Sprintf("a%d", i+1), at: at(0x30, uint32(i)), src: relayA}.msg()); err != nil {
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
	put(t, e.js, crafted{id: "legacy", at: at(0x40, 0), src: sink.Source{}, dead: true})
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
