package jetstream

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/sink"
)

// A wire message reused for messages of every shape (optional headers
// present or not, row headers, dead letters, a recovery probe's guard,
// CloudEvents) holds, after each fill, exactly the headers a fresh one
// filled the same way holds, and its kept size is the map's. Fails when
// sweep is left out (an earlier message's Outbox-Created-At stays) or a
// size update is (the size drifts).
func TestReusedWireMessage(t *testing.T) {
	stamp := sink.NewStamp(sink.Source{System: "7412345678901234567", Timeline: 1, Slot: "outbox_relay",
		Database: "app", Table: "public.outbox_events"})
	full := event(1, nil)
	full.Table = "public.outbox_events"
	full.Headers = []decode.Header{{Name: "traceparent", Value: rowTraceparent}, {Name: "x-tenant", Value: " padded "}}
	bare := event(2, nil)
	bare.CreatedAt = ""
	odd := event(3, nil)
	odd.AggregateID = "agg 3\n"
	odd.Position.Index = 12
	type fill func(w *wireMsg)
	eventFill := func(ev *decode.Event) fill {
		return func(w *wireMsg) { w.fillEvent(ev, "outbox.order.created", "_INBOX.x.1.1") }
	}
	deadFill := func(ev *decode.Event, limit int) fill {
		return func(w *wireMsg) {
			w.fillDeadLetter(ev, ev.ID, "outbox.dead", "_INBOX.x.2.1", "outbox.order.created", "too large", limit)
		}
	}
	probeFill := func(ev *decode.Event) fill {
		return func(w *wireMsg) {
			w.fillEvent(ev, "outbox.order.created", "_INBOX.x.3.1")
			w.set(natsjs.ExpectedLastSubjSeqHeader, "41")
		}
	}
	fills := []fill{eventFill(full), eventFill(bare), deadFill(full, 1<<20), eventFill(odd), deadFill(odd, 0),
		probeFill(bare), eventFill(full), eventFill(bare), probeFill(full), deadFill(bare, 1<<20), eventFill(odd)}
	for _, format := range []Format{{}, {CloudEvents: true, CESource: "/orders"}} {
		reused := newWireMsg().withSource(stamp).withFormat(format)
		for round := range 2 {
			for i, f := range fills {
				fresh := newWireMsg().withSource(stamp).withFormat(format)
				f(fresh)
				f(reused)
				where := fmt.Sprintf("CloudEvents %v, round %d, fill %d", format.CloudEvents, round, i)
				if !maps.EqualFunc(reused.msg.Header, fresh.msg.Header, slices.Equal) {
					t.Fatalf("%s: headers\n%v\nwant\n%v", where, reused.msg.Header, fresh.msg.Header)
				}
				if got, want := reused.headerBytes(), headerSize(fresh.msg.Header); got != want {
					t.Fatalf("%s: kept size %d, the map's %d", where, got, want)
				}
				if got, want := fresh.headerBytes(), headerSize(fresh.msg.Header); got != want {
					t.Fatalf("%s: a fresh message's kept size %d, the map's %d", where, got, want)
				}
			}
		}
	}
}

// headerSize is the size of the header block nats.go writes for h, by a
// walk of the map: what wireMsg.headerBytes keeps without one.
func headerSize(h nats.Header) int {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}

// The atomic batch headers change through the wire message's set and
// del, so its kept size stays the map's across thousands of batches,
// fallbacks and ordinary messages between them. Fails when batchHeaders
// deletes from the map itself: the kept size then grows by each deleted
// header, until every event is too large to publish (after about 3,000
// two-event batches).
func TestBatchHeadersKeepTheSize(t *testing.T) {
	p := &Publisher{wire: newWireMsg(), atomic: &atomicTx{}, instance: "test"}
	seq := uint64(1)
	for round := range 5000 {
		marks := []batchMark{{first: seq, n: 2}, {first: seq, n: 2}, {first: seq + 2, n: 1}, {first: seq + 3, fallback: "larger than the limit"}}
		for i, mark := range marks {
			ev := event(int(seq)+i, nil)
			p.wire.fillEvent(ev, "outbox.order.created", "_INBOX.x.1.1")
			p.batchHeaders(seq+uint64(i), 1, mark, round%7 == 0 && i == 3)
			if got, want := p.wire.headerBytes(), headerSize(p.wire.msg.Header); got != want {
				t.Fatalf("round %d, message %d: kept header size %d, the map's %d", round, i, got, want)
			}
		}
		seq += uint64(len(marks))
	}
}
