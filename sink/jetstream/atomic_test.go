package jetstream

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
	"github.com/outbox-relay/outbox-relay/sink"
)

// offerTx offers events from..to as one transaction, waiting for room.
func offerTx(ctx context.Context, t *testing.T, p *Publisher, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		for {
			if _, ok := p.Offer(event(i, nil)); ok {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("offer event %d: %v", i, ctx.Err())
			case <-p.Room():
			}
		}
	}
	p.EndBatch(time.Now())
}

// batches groups the stream's messages by Nats-Batch-Id ("" for messages
// published alone), checking that each batch is stored at consecutive
// stream sequences, numbered 1, 2, …; it returns each batch's ids.
func batches(t *testing.T, msgs []storedMsg) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	last := map[string]uint64{}
	for _, m := range msgs {
		b := m.header.Get(headerBatchID)
		if prev, ok := last[b]; ok && b != "" && prev+1 != m.seq {
			t.Fatalf("batch %s split in the stream: sequence %d after %d", b, m.seq, prev)
		}
		last[b] = m.seq
		out[b] = append(out[b], m.id)
		if b != "" && m.header.Get(headerBatchSeq) != strconv.Itoa(len(out[b])) {
			t.Fatalf("event %s is number %d of batch %s, its %s says %s", m.id, len(out[b]), b, headerBatchSeq, m.header.Get(headerBatchSeq))
		}
	}
	return out
}

// requireWhole fails the test unless each transaction of two events or
// more, of the sizes given, from event first on, is stored within one
// atomic batch (a batch may hold several whole transactions).
func requireWhole(t *testing.T, msgs []storedMsg, first int, sizes ...int) {
	t.Helper()
	batches(t, msgs)
	byID := map[string]string{}
	for _, m := range msgs {
		byID[m.id] = m.header.Get(headerBatchID)
	}
	i := first
	for _, size := range sizes {
		b := byID[event(i, nil).ID]
		for j := i; j < i+size && size > 1; j++ {
			if got := byID[event(j, nil).ID]; got == "" || got != b {
				t.Fatalf("transaction of events %d to %d: event %d in batch %q, event %d in %q", i, i+size-1, i, b, j, got)
			}
		}
		i += size
	}
}

// TestAtomicTransactions: transactions of several events are stored as
// one atomic batch each, one event alone, in order.
func TestAtomicTransactions(t *testing.T) {
	e := newTestEnv(t, natsjs.StreamConfig{Duplicates: time.Second, AllowAtomicPublish: true})
	p := e.publisher(t, Config{Atomic: true, Stream: e.stream, Window: 64})
	run(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	sizes := []int{3, 1, 10, 2, 40, 1, 5}
	n := 0
	for _, size := range sizes {
		offerTx(ctx, t, p, n+1, n+size)
		n += size
	}
	drain(t, p, 10*time.Second)
	msgs := e.contents(t)
	if got, want := ids(msgs), wantIDs(1, n); !slices.Equal(got, want) {
		t.Fatalf("stream holds %v, want %v", got, want)
	}
	requireWhole(t, msgs, 1, sizes...)
	for _, m := range msgs {
		if v := m.header.Get(contract.HeaderAtomicFallback); v != "" {
			t.Fatalf("event %s marked %s: %q", m.id, contract.HeaderAtomicFallback, v)
		}
	}
	if p.AckedThrough() != uint64(n) {
		t.Fatalf("AckedThrough = %d, want %d", p.AckedThrough(), n)
	}
	if n := failures(p); n != 0 {
		t.Fatalf("%v publishes failed: each batch's PubAck must settle all its events", n)
	}
}

// failures counts the publisher's failed publishes, of every reason.
func failures(p *Publisher) float64 {
	ch := make(chan prometheus.Metric, 16)
	go func() { p.metrics.Failures.Collect(ch); close(ch) }()
	var n float64
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err == nil {
			n += d.GetCounter().GetValue()
		}
	}
	return n
}

// TestAtomicFallbackLargeTransaction: a transaction larger than the limit
// goes out as ordinary messages, each marked with the reason; the next one
// is atomic again.
func TestAtomicFallbackLargeTransaction(t *testing.T) {
	e := newTestEnv(t, natsjs.StreamConfig{Duplicates: time.Second, AllowAtomicPublish: true})
	p := e.publisher(t, Config{Atomic: true, AtomicLimit: 5, Stream: e.stream})
	run(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	offerTx(ctx, t, p, 1, 8)  // over the limit
	offerTx(ctx, t, p, 9, 13) // at the limit
	drain(t, p, 10*time.Second)
	msgs := e.contents(t)
	if got, want := ids(msgs), wantIDs(1, 13); !slices.Equal(got, want) {
		t.Fatalf("stream holds %v, want %v", got, want)
	}
	for _, m := range msgs[:8] {
		if v := m.header.Get(contract.HeaderAtomicFallback); !strings.Contains(v, "more than 5 events") || m.header.Get(headerBatchID) != "" {
			t.Fatalf("event %s of the large transaction: %s %q, batch %q; want the reason and no batch", m.id, contract.HeaderAtomicFallback, v, m.header.Get(headerBatchID))
		}
	}
	requireWhole(t, msgs[8:], 9, 5)
}

// TestAtomicDuplicateInWindow: a batch holding ids the stream stored
// within its duplicate window is refused whole (10201); recovery reads the
// stream and the transaction goes out as ordinary messages: the stored
// events are not stored again, the others are, in order. Found: recovery's
// read reaches the copies and does not send them again. Unfound: they lie
// before the publisher's start, where the read does not reach, and the
// window drops the ordinary copies. (In the relay the take-up's Holdings
// keeps such events from being offered at all; this is the guard behind
// it.)
func TestAtomicDuplicateInWindow(t *testing.T) {
	t.Run("Found", func(t *testing.T) { duplicateInWindow(t, true) })
	t.Run("Unfound", func(t *testing.T) { duplicateInWindow(t, false) })
}

func duplicateInWindow(t *testing.T, found bool) {
	e := newTestEnv(t, natsjs.StreamConfig{Duplicates: time.Minute, AllowAtomicPublish: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, i := range []int{2, 3} { // an earlier copy of part of the transaction
		m := FormatEventMsg(event(i, nil), "outbox.order.created", Format{})
		if _, err := e.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	start := e.lastSeq(t)
	if found {
		start = 0
	}
	p := e.publisher(t, Config{Atomic: true, Stream: e.stream, StartSeq: start})
	p.log = zerolog.New(zerolog.NewTestWriter(t))
	run(t, p)
	offerTx(ctx, t, p, 1, 4)
	// Settled before the next transaction goes: a transaction sent while
	// a batch before it is refused would be stored ahead of the refused
	// batch's events (the order exception docs/guarantees.md states).
	drain(t, p, 10*time.Second)
	offerTx(ctx, t, p, 5, 7)
	drain(t, p, 10*time.Second)

	msgs := e.contents(t)
	want := append([]string{event(2, nil).ID, event(3, nil).ID}, wantIDs(1, 1)...)
	want = append(want, wantIDs(4, 7)...)
	if got := ids(msgs); !slices.Equal(got, want) {
		t.Fatalf("stream holds %v, want %v", got, want)
	}
	for _, m := range msgs[2:4] {
		if v := m.header.Get(contract.HeaderAtomicFallback); !strings.Contains(v, "10201") {
			t.Fatalf("event %s: %s %q, want the 10201 reason", m.id, contract.HeaderAtomicFallback, v)
		}
	}
	requireWhole(t, msgs[4:], 5, 3)
	// The refusal happened, and recovery ran.
	if n := testutil.ToFloat64(p.metrics.Failures.WithLabelValues("rejected")) + testutil.ToFloat64(p.metrics.Failures.WithLabelValues("server_error")); n == 0 {
		t.Fatal("no batch was refused: the test did not reach the 10201 case")
	}
	if p.AckedThrough() != 7 {
		t.Fatalf("AckedThrough = %d, want 7", p.AckedThrough())
	}
	// Found, the copies are not sent again; unfound, the window drops them.
	if n, want := testutil.ToFloat64(p.metrics.Duplicates), map[bool]float64{true: 0, false: 2}[found]; n != want {
		t.Fatalf("%v publishes acknowledged as duplicates, want %v", n, want)
	}
}

// TestAtomicDeadLetterInTransaction: a transaction with an event that can
// never be published as it is goes out as ordinary messages, marked, its
// dead letter to the dead-letter subject; the next transaction is atomic.
func TestAtomicDeadLetterInTransaction(t *testing.T) {
	e := newTestEnv(t, natsjs.StreamConfig{Duplicates: time.Second, AllowAtomicPublish: true})
	p := e.publisher(t, Config{Atomic: true, Stream: e.stream})
	run(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 1; i <= 3; i++ {
		ev := event(i, nil)
		if i == 2 {
			ev.Problem = "aggregate_id is NULL"
		}
		if _, ok := p.Offer(ev); !ok {
			t.Fatal("Offer refused an event")
		}
	}
	p.EndBatch(time.Now())
	offerTx(ctx, t, p, 4, 5)
	drain(t, p, 10*time.Second)
	msgs := e.contents(t)
	if len(msgs) != 5 || msgs[1].subject != testDeadLetter {
		t.Fatalf("stream holds %v on %v, want 5 messages, the second a dead letter", ids(msgs), msgs)
	}
	for _, m := range msgs[:3] {
		if v := m.header.Get(contract.HeaderAtomicFallback); v != "a dead letter in the transaction" || m.header.Get(headerBatchID) != "" {
			t.Fatalf("message %s of the transaction with a dead letter: %s %q, batch %q", m.id, contract.HeaderAtomicFallback, v, m.header.Get(headerBatchID))
		}
	}
	requireWhole(t, msgs[3:], 4, 2)
}

// TestAtomicCommitAckLost: the commit's PubAck of a batch is lost; past
// the ack timeout and the duplicate window, recovery finds the batch in the
// stream and does not publish it again.
func TestAtomicCommitAckLost(t *testing.T) {
	e := newTestEnv(t, natsjs.StreamConfig{Duplicates: 100 * time.Millisecond, AllowAtomicPublish: true})
	p := e.publisher(t, Config{Atomic: true, Stream: e.stream, AckTimeout: 300 * time.Millisecond})
	gate := gateReplies(t, p, gateDrop)
	run(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	offerTx(ctx, t, p, 1, 5)
	waitFor(t, 5*time.Second, "the batch stored", func() bool { return e.lastSeq(t) == 5 })
	waitFor(t, 5*time.Second, "the commit's PubAck dropped", func() bool { return gate.droppedCount() >= 1 })
	if n := gate.droppedCount(); n != 1 {
		t.Fatalf("%d replies for a batch of 5: want the commit's only", n)
	}
	time.Sleep(300 * time.Millisecond) // past the duplicate window
	gate.set(gatePass)
	offerTx(ctx, t, p, 6, 8)
	drain(t, p, 10*time.Second)
	msgs := e.contents(t)
	if got, want := ids(msgs), wantIDs(1, 8); !slices.Equal(got, want) {
		t.Fatalf("stream holds %v, want %v", got, want)
	}
	requireWhole(t, msgs, 1, 5, 3)
	if n := testutil.ToFloat64(p.metrics.Failures.WithLabelValues("timeout")); n == 0 {
		t.Fatal("the commit never timed out: recovery did not run")
	}
}

// TestAtomicAcrossServerRestart: JetStream stops with batches in flight,
// for longer than the duplicate window; every event is stored once, in
// order, and every transaction whole.
func TestAtomicAcrossServerRestart(t *testing.T) {
	const dupWindow = 100 * time.Millisecond
	e := newTestEnv(t, natsjs.StreamConfig{Duplicates: dupWindow, AllowAtomicPublish: true})
	p := e.publisher(t, Config{Atomic: true, Stream: e.stream, Window: 64, AckTimeout: time.Second})
	gate := gateReplies(t, p, gatePass)
	run(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	const tx, stored, total = 7, 140, 700 // transactions of 7 events
	for i := 1; i <= stored; i += tx {
		if i == stored/2+1 {
			waitFor(t, 5*time.Second, "the first transactions acknowledged", func() bool { return p.AckedThrough() == stored/2 })
			gate.set(gateDrop)
		}
		offerTx(ctx, t, p, i, i+tx-1)
	}
	waitFor(t, 5*time.Second, "JetStream to store the first transactions", func() bool { return e.lastSeq(t) == stored })
	e.stop()
	gate.set(gatePass)
	published := make(chan struct{})
	go func() {
		defer close(published)
		for i := stored + 1; i <= total; i += tx {
			for j := i; j < i+tx; j++ {
				for {
					if _, ok := p.Offer(event(j, nil)); ok {
						break
					}
					select {
					case <-ctx.Done():
						return
					case <-p.Room():
					}
				}
			}
			p.EndBatch(time.Now())
		}
	}()
	time.Sleep(2 * dupWindow)
	e.start(t)
	select {
	case <-published:
	case <-time.After(10 * time.Second):
		t.Fatalf("still publishing 10s after the restart: %d unacknowledged", p.Pending())
	}
	drain(t, p, 10*time.Second)
	msgs := e.contents(t)
	if got, want := ids(msgs), wantIDs(1, total); !slices.Equal(got, want) {
		t.Fatalf("stream holds %d messages, want the %d events once each in order; first difference at %s", len(got), len(want), firstDiff(got, want))
	}
	sizes := make([]int, total/tx)
	for i := range sizes {
		sizes[i] = tx
	}
	requireWhole(t, msgs, 1, sizes...)
	if failures(p) == 0 {
		t.Fatal("no publish failed: the stop did not hit batches in flight, and recovery did not run")
	}
}

// TestAtomicStreamRequired: with atomic transactions on, a stream without
// allow_atomic is refused with the fix; a stream the relay creates allows
// them.
func TestAtomicStreamRequired(t *testing.T) {
	e := newTestEnv(t, natsjs.StreamConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tmpl, err := sink.ParseTemplate(testTemplate)
	if err != nil {
		t.Fatal(err)
	}
	spec := StreamSpec{Name: testStream, Template: tmpl, DeadLetterSubject: testDeadLetter, Atomic: true}
	_, err = EnsureStream(ctx, e.js, spec, zerolog.Nop())
	if !errors.Is(err, ErrStreamConfig) || !strings.Contains(err.Error(), "allow_atomic") || !strings.Contains(err.Error(), "--atomic-transactions") {
		t.Fatalf("EnsureStream of a stream without allow_atomic: %v; want ErrStreamConfig naming allow_atomic and the flag", err)
	}
	spec.Atomic = false
	if _, err := EnsureStream(ctx, e.js, spec, zerolog.Nop()); err != nil {
		t.Fatalf("without atomic transactions: %v", err)
	}

	spec = StreamSpec{Name: "CREATED", Template: parseTemplate(t, "created.{event_type}"), DeadLetterSubject: "created-dlq", Atomic: true}
	cfg, err := EnsureStream(ctx, e.js, spec, zerolog.Nop())
	if err != nil || !cfg.AllowAtomicPublish {
		t.Fatalf("created stream: allow_atomic %v, err %v; want true", cfg.AllowAtomicPublish, err)
	}
	if !serverAtLeast(e.nc.ConnectedServerVersion(), 2, 12) || serverAtLeast("2.11.9", 2, 12) || !serverAtLeast("3.0.0", 2, 12) {
		t.Fatal("serverAtLeast")
	}
}

func parseTemplate(t *testing.T, s string) sink.Template {
	t.Helper()
	tmpl, err := sink.ParseTemplate(s)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// TestAtomicCoalesces: transactions that end while a batch is in flight
// wait for it and then go out together, as one batch of whole
// transactions: nats-server's cost is per batch (an R1 file stream syncs
// each to disk). One that ends with nothing in flight goes at once.
func TestAtomicCoalesces(t *testing.T) {
	e := newTestEnv(t, natsjs.StreamConfig{Duplicates: time.Second, AllowAtomicPublish: true})
	p := e.publisher(t, Config{Atomic: true, Stream: e.stream, AtomicLimit: 8})
	gate := gateReplies(t, p, gateHold)
	run(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	offerTx(ctx, t, p, 1, 3) // goes at once
	waitFor(t, 5*time.Second, "the first batch's PubAck", func() bool { return gate.heldCount() == 1 })
	offerTx(ctx, t, p, 4, 5)  // these wait for it…
	offerTx(ctx, t, p, 6, 6)  //
	offerTx(ctx, t, p, 7, 10) // …and make a batch of 7
	time.Sleep(100 * time.Millisecond)
	if n := e.lastSeq(t); n != 3 {
		t.Fatalf("stream holds %d messages while the first batch's PubAck is held, want 3", n)
	}
	gate.open()
	// Stored, the first batch lets the waiting ones go, with no further
	// offer to send them.
	drain(t, p, 10*time.Second)
	offerTx(ctx, t, p, 11, 13)
	drain(t, p, 10*time.Second)
	msgs := e.contents(t)
	if got, want := ids(msgs), wantIDs(1, 13); !slices.Equal(got, want) {
		t.Fatalf("stream holds %v, want %v", got, want)
	}
	requireWhole(t, msgs, 1, 3, 2, 1, 4, 3)
	got := batches(t, msgs)
	sizes := map[int]int{}
	for _, evs := range got {
		sizes[len(evs)]++
	}
	if len(got) != 3 || sizes[3] != 2 || sizes[7] != 1 {
		t.Fatalf("batches %v: want the first transaction alone, the next three together (7 events, under the limit of 8), the last alone", got)
	}
}

// TestAtomicServerBatchLimit: a server whose max_batch_size is lower than
// the relay's limit refuses a larger batch (10199); that transaction goes
// out as ordinary messages, marked, and the relay lowers its limit: later
// transaction within the server's limit are atomic again, larger ones fall
// back without a refusal.
func TestAtomicServerBatchLimit(t *testing.T) {
	opts := devenv.NATSOptions{StoreDir: t.TempDir()}.ServerOptions()
	opts.Port = -1
	opts.JetStreamLimits.MaxBatchSize = 4
	srv, err := devenv.ServeNATS(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	e := &testEnv{dialer: &gatedDialer{}}
	e.nc, e.js = connectJS(t, srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if e.stream, err = e.js.CreateStream(ctx, natsjs.StreamConfig{Name: testStream, Subjects: []string{"outbox.>", testDeadLetter},
		Storage: natsjs.FileStorage, Duplicates: time.Second, AllowAtomicPublish: true}); err != nil {
		t.Fatal(err)
	}
	p := e.publisher(t, Config{Atomic: true, Stream: e.stream})
	run(t, p)
	offerTx(ctx, t, p, 1, 6) // refused: 6 > 4
	drain(t, p, 10*time.Second)
	offerTx(ctx, t, p, 7, 9)   // within both limits
	offerTx(ctx, t, p, 10, 14) // over the relay's lowered limit of 3
	drain(t, p, 10*time.Second)
	msgs := e.contents(t)
	if got, want := ids(msgs), wantIDs(1, 14); !slices.Equal(got, want) {
		t.Fatalf("stream holds %v, want %v", got, want)
	}
	for i, m := range msgs {
		v := m.header.Get(contract.HeaderAtomicFallback)
		switch {
		case i < 6 && !strings.Contains(v, "10199"):
			t.Fatalf("event %s of the refused transaction: %s %q, want the 10199 reason", m.id, contract.HeaderAtomicFallback, v)
		case i >= 9 && !strings.Contains(v, "more than 3 events"):
			t.Fatalf("event %s of the transaction over the lowered limit: %s %q", m.id, contract.HeaderAtomicFallback, v)
		}
	}
	requireWhole(t, msgs[6:9], 7, 3)
	if n := failures(p); n != 1 {
		t.Fatalf("%v publishes failed, want the one refusal", n)
	}
}
