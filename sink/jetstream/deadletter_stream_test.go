package jetstream

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
)

// TestDeadLetterInAnotherStream: the dead-letter subject is stored by a
// stream of its own whose sequence numbers are far ahead of the events'
// stream. A dead letter's PubAck must not count as a position in the
// events' stream: after an outage longer than the duplicate window,
// recovery still finds the events stored without their PubAck (and a dead
// letter stored without its PubAck) and publishes nothing twice.
func TestDeadLetterInAnotherStream(t *testing.T) {
	const dupWindow = 100 * time.Millisecond // JetStream's smallest
	e := newTestEnv(t, natsjs.StreamConfig{Duplicates: dupWindow, Subjects: []string{"outbox.>"}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dlq, err := e.js.CreateStream(ctx, natsjs.StreamConfig{Name: "DLQ", Subjects: []string{testDeadLetter},
		Storage: natsjs.FileStorage, Duplicates: dupWindow, FirstSeq: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	p := e.publisher(t, Config{Window: 64, AckTimeout: time.Second, Stream: e.stream})
	gate := gateReplies(t, p, gatePass)
	run(t, p)
	const deadAcked, deadLost = 3, 13
	publish := func(from, to int) { t.Helper(); publishRange(ctx, t, p, from, to, deadAcked, deadLost) }

	publish(1, 10)
	waitFor(t, 5*time.Second, "events 1..10 acknowledged", func() bool { return p.AckedThrough() == 10 })
	// 11..20 are stored, their PubAcks lost.
	gate.set(gateDrop)
	publish(11, 20)
	waitFor(t, 5*time.Second, "events 11..20 stored", func() bool { return e.lastSeq(t) == 18 })
	waitFor(t, 5*time.Second, "the second dead letter stored", func() bool {
		info, err := dlq.Info(ctx)
		return err == nil && info.State.Msgs == 2
	})
	// Not synchronisation: the outage outlasts the duplicate window, so
	// only the publisher can keep stored events from repeating.
	time.Sleep(2 * dupWindow)
	gate.set(gatePass)
	publish(21, 25) // sent at once: nothing has failed yet

	drain(t, p, 10*time.Second)
	var want []string
	for i := 1; i <= 25; i++ {
		if i != deadAcked && i != deadLost {
			want = append(want, event(i, nil).ID)
		}
	}
	if got := ids(e.contents(t)); !slices.Equal(got, want) {
		t.Errorf("events' stream holds %v\nwant %v\nfirst difference at %s", got, want, firstDiff(got, want))
	}
	var dead []string
	err = ForEach(ctx, dlq, nil, Read{HeadersOnly: true}, func(m *natsjs.RawStreamMsg) bool {
		dead = append(dead, m.Header.Get(contract.HeaderMsgID))
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{contract.DeadLetterMsgIDPrefix + event(deadAcked, nil).ID, contract.DeadLetterMsgIDPrefix + event(deadLost, nil).ID}; !slices.Equal(dead, want) {
		t.Errorf("dead-letter stream holds %v, want %v", dead, want)
	}
}

// TestParseReplyStream: a PubAck names the stream that stored the message.
func TestParseReplyStream(t *testing.T) {
	cases := []struct {
		data, stream string
		seq          uint64
		duplicate    bool
	}{
		{`{"stream":"OUTBOX","seq":5}`, "OUTBOX", 5, false},
		{`{"stream":"DLQ","domain":"hub","seq":1000000,"duplicate":true}`, "DLQ", 1000000, true},
		{`{"stream":"A\"B","seq":7}`, `A"B`, 7, false}, // escaped: read by encoding/json
	}
	for _, c := range cases {
		r := parseReply(&nats.Msg{Data: []byte(c.data)})
		if r.err != nil || string(r.stream) != c.stream || r.streamSeq != c.seq || r.duplicate != c.duplicate {
			t.Errorf("parseReply(%s) = stream %q seq %d duplicate %v err %v; want %q %d %v", c.data, r.stream, r.streamSeq, r.duplicate, r.err, c.stream, c.seq, c.duplicate)
		}
	}
}
