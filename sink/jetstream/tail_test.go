package jetstream

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/sink"

	"github.com/jackc/pglogrepl"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
)

// countingStream opens the test stream on a connection of its own, whose
// published messages (JetStream API requests, fetches) the test counts.
func countingStream(t *testing.T, e *testEnv, name string) (natsjs.Stream, func() uint64) {
	t.Helper()
	nc, js := connectJS(t, e.srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	base := nc.Stats().OutMsgs
	return stream, func() uint64 { return nc.Stats().OutMsgs - base }
}

// fill stores n messages built by msg, fast (no PubAcks), and waits until
// the stream holds them.
func fill(t *testing.T, e *testEnv, n int, msg func(i int) *nats.Msg) {
	t.Helper()
	before := e.lastSeq(t)
	for i := 0; i < n; i++ {
		if err := e.nc.PublishMsg(msg(i)); err != nil {
			t.Fatal(err)
		}
		if i%10000 == 9999 {
			if err := e.nc.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, time.Minute, fmt.Sprintf("%d messages stored", n), func() bool { return e.lastSeq(t) == before+uint64(n) })
}

// fillRows stores n copies of c, each with an id of its own: rows
// published from a snapshot.
func fillRows(t *testing.T, e *testEnv, n int, c crafted) {
	t.Helper()
	m := c.msg()
	id := m.Header[contract.HeaderMsgID]
	before := e.lastSeq(t)
	for i := 0; i < n; i++ {
		id[0] = fmt.Sprintf("%s-%06d", c.id, i)
		if err := e.nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		if i%10000 == 9999 {
			if err := e.nc.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, time.Minute, fmt.Sprintf("%d messages stored", n), func() bool { return e.lastSeq(t) == before+uint64(n) })
}

// TestReadTailBoundedOverSnapshotRows: after a repair of 100k rows (all
// published from the new slot's snapshot, commit LSN 0) and a few events
// streamed since, the tail search must not walk the snapshot rows one
// lookup at a time (before the fix: one GetMsg per row, past the 5-minute
// budget). It is bounded by a logarithmic number of lookups, also when the
// snapshot rows were published by a relay without source headers.
func TestReadTailBoundedOverSnapshotRows(t *testing.T) {
	const streamed = 5
	for _, tc := range []struct {
		name     string
		rows     int
		snapshot sink.Source
	}{
		{"stamped snapshot rows", 100_000, sink.Source{System: relayB.System, Timeline: 1, Slot: relayB.Slot}}, // no creation point yet
		{"snapshot rows of an older relay", 20_000, sink.Source{}},
	} {
		rows := tc.rows
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, natsjs.StreamConfig{Subjects: []string{"outbox.>", testDeadLetter}})
			start := time.Now()
			fillRows(t, e, rows, crafted{id: "row", at: at(0, 0), src: tc.snapshot})
			t.Logf("stored %d rows in %s", rows, time.Since(start))
			var want []string
			for i := 0; i < streamed; i++ {
				c := crafted{id: fmt.Sprintf("ev-%d", i), at: at(relayB.Origin+pglogrepl.LSN(0x100*(i+1)), 0), src: relayB}
				put(t, e.js, c)
				want = append(want, fmt.Sprintf("%s@%s", c.id, c.at))
			}
			stream, requests := countingStream(t, e, testStream)

			// The slot confirmed nothing since its creation: every streamed
			// event is in the tail.
			start = time.Now()
			got := describe(readTail(t, Tail{Stream: stream, Subject: "outbox.>", DeadLetterSubject: testDeadLetter, From: relayB.Origin, Source: relayB}))
			took, n := time.Since(start), requests()
			if !slices.Equal(got, want) {
				t.Fatalf("tail %v, want %v", got, want)
			}
			t.Logf("tail of %d events behind %d snapshot rows: %d requests, %s", streamed, rows, n, took)
			// A search of 2·log2(100k) lookups, a few stream infos, one
			// headers-only read of the tail.
			if n > 60 {
				t.Errorf("the tail read took %d requests, want at most 60", n)
			}
			if took > 10*time.Second {
				t.Errorf("the tail read took %s", took)
			}

			// A slot that confirmed the third event: the last two remain.
			got = describe(readTail(t, Tail{Stream: stream, Subject: "outbox.>", DeadLetterSubject: testDeadLetter, From: relayB.Origin + 0x301, Source: relayB}))
			if !slices.Equal(got, want[3:]) {
				t.Fatalf("tail from 0/401: %v, want %v", got, want[3:])
			}
		})
	}
}

// TestReadTailPassesOverOtherRelays: long runs of another relay's messages
// (its snapshot rows, its events) between this relay's cost a bounded
// number of lookups each, and never hide this relay's tail.
func TestReadTailPassesOverOtherRelays(t *testing.T) {
	e := newTestEnv(t, natsjs.StreamConfig{})
	put(t, e.js, crafted{id: "b0", at: at(0x200, 0), src: relayB}, crafted{id: "b1", at: at(0x300, 0), src: relayB})
	fill(t, e, 5000, func(i int) *nats.Msg {
		lsn := pglogrepl.LSN(0)
		if i >= 2500 {
			lsn = 0x100 // A's positions are all before B's tail
		}
		return crafted{id: fmt.Sprintf("a-%d", i), at: at(lsn, uint32(i)), src: relayA}.msg()
	})
	put(t, e.js, crafted{id: "b2", at: at(0x400, 0), src: relayB})
	fill(t, e, 3000, func(i int) *nats.Msg {
		return crafted{id: fmt.Sprintf("a2-%d", i), at: at(0x150, uint32(i)), src: relayA}.msg()
	})
	stream, requests := countingStream(t, e, testStream)
	got := describe(readTail(t, Tail{Stream: stream, Subject: "outbox.>", DeadLetterSubject: testDeadLetter, From: 0x300, Source: relayB}))
	if want := []string{"b1@0/300#0", "b2@0/400#0"}; !slices.Equal(got, want) {
		t.Fatalf("tail %v, want %v", got, want)
	}
	t.Logf("%d requests", requests())
}

// TestReadTailDeadLetterStream: the dead-letter subject is held by another
// stream than the events. A dead letter whose PubAck arrived before the
// relay died is in the tail, so the replay skips it instead of
// dead-lettering the event again. Before the fix the tail read only the
// events' stream.
func TestReadTailDeadLetterStream(t *testing.T) {
	e := newTestEnv(t, natsjs.StreamConfig{Subjects: []string{"outbox.>"}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := e.js.CreateStream(ctx, natsjs.StreamConfig{Name: "DLQ", Subjects: []string{testDeadLetter},
		Storage: natsjs.FileStorage, FirstSeq: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	put(t, e.js,
		crafted{id: "e0", at: at(0x200, 0), src: relayB},
		crafted{id: "dead-old", at: at(0x200, 1), src: relayB, dead: true},
		crafted{id: "e1", at: at(0x300, 0), src: relayB},
		crafted{id: "dead-1", at: at(0x300, 1), src: relayB, dead: true},
		crafted{id: "dead-a", at: at(0x300, 2), src: relayA, dead: true},
		crafted{id: "e2", at: at(0x300, 2), src: relayB},
	)
	dead, err := DeadLetterStream(ctx, e.js, e.stream, testDeadLetter)
	if err != nil || dead == nil || dead.CachedInfo().Config.Name != "DLQ" {
		t.Fatalf("dead-letter stream %v, %v; want DLQ", dead, err)
	}
	if same, err := DeadLetterStream(ctx, e.js, e.stream, "outbox.dead"); err != nil || same != nil {
		t.Fatalf("a dead-letter subject of the events' stream: %v, %v", same, err)
	}
	if none, err := DeadLetterStream(ctx, e.js, e.stream, "nowhere"); err != nil || none != nil {
		t.Fatalf("a dead-letter subject no stream holds: %v, %v", none, err)
	}
	got := describe(readTail(t, Tail{Stream: e.stream, Subject: "outbox.>", DeadLetters: dead, DeadLetterSubject: testDeadLetter, From: 0x300, Source: relayB}))
	if want := []string{"e1@0/300#0", "e2@0/300#2", "dead-1@0/300#1(dead)"}; !slices.Equal(got, want) {
		t.Fatalf("tail %v, want %v", got, want)
	}
}
