package jetstream

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
)

// fastPublisher returns a Publisher with fast ingest on (auto) on e's
// stream, and fails the test unless it publishes in batches.
func fastPublisher(t *testing.T, e *testEnv, cfg Config) *Publisher {
	t.Helper()
	cfg.FastIngest, cfg.Stream = FastIngestAuto, e.stream
	p := e.publisher(t, cfg)
	if p.fi == nil {
		t.Fatal("fast ingest is off on a stream with allow_batched")
	}
	return p
}

// TestFastIngestInOrder publishes a few batches' worth of events, two dead
// letters among them (one known when offered, one found too large when
// written), in fast-ingest batches: every one stored once, in
// order, the dead letter on its subject, AckedThrough at the last, and
// the batches committed (more than one batch went out).
func TestFastIngestInOrder(t *testing.T) {
	e := newTestEnv(t, natsjs.StreamConfig{AllowBatchPublish: true})
	p := fastPublisher(t, e, Config{Window: 256})
	run(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n, big = 3000, 2222
	publishRange(ctx, t, p, 1, big-1, 1234)
	// Too large for the server: found a dead letter only when written,
	// after it was given its place in a batch.
	if _, err := p.Publish(ctx, event(big, bytes.Repeat([]byte("x"), 2<<20))); err != nil {
		t.Fatal(err)
	}
	publishRange(ctx, t, p, big+1, n)
	drain(t, p, 10*time.Second)
	got := ids(e.contents(t))
	want := wantIDs(1, n)
	want[1233], want[big-1] = "dead-letter:ev-01234", "dead-letter:ev-02222"
	if !slices.Equal(got, want) {
		t.Fatalf("stream differs from the events offered at %s", firstDiff(got, want))
	}
	if p.AckedThrough() != n {
		t.Fatalf("AckedThrough %d, want %d", p.AckedThrough(), n)
	}
	p.mu.Lock()
	batches := p.fi.id
	p.mu.Unlock()
	if batches < n/fastBatchMax {
		t.Fatalf("%d batches for %d events: fast ingest was not used", batches, n)
	}
	if f := failures(p); f != 0 {
		t.Fatalf("%v failures publishing to a healthy server", f)
	}
	if got := testutil.ToFloat64(p.metrics.Published); got != n-2 {
		t.Fatalf("published metric %v, want %d", got, n-2)
	}
}

// TestFastIngestDeduplicates publishes the same ids twice within the
// stream's duplicate window, in fast-ingest batches: stored once, and the
// second run is confirmed all the same.
func TestFastIngestDeduplicates(t *testing.T) {
	e := newTestEnv(t, natsjs.StreamConfig{AllowBatchPublish: true, Duplicates: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 2000
	for round := 1; round <= 2; round++ {
		p := fastPublisher(t, e, Config{Window: 256})
		run(t, p)
		publishRange(ctx, t, p, 1, n)
		drain(t, p, 10*time.Second)
		if f := failures(p); f != 0 {
			t.Fatalf("round %d: %v failures", round, f)
		}
		_ = p.Close()
	}
	got := ids(e.contents(t))
	if want := wantIDs(1, n); !slices.Equal(got, want) {
		t.Fatalf("stream holds %d messages, want each of %d once: %s", len(got), n, firstDiff(got, want))
	}
}

// TestFastIngestAbandonedBatch stalls the Publisher mid-batch, with
// messages on the wire, past the server's batch timeout: the server drops
// the batch, refuses what comes next in it, and the Publisher recovers
// (reads the stream, republishes what it lacks): every event once, in
// order.
func TestFastIngestAbandonedBatch(t *testing.T) {
	const batchTimeout = 300 * time.Millisecond
	e := newTestEnv(t, natsjs.StreamConfig{AllowBatchPublish: true, Duplicates: 100 * time.Millisecond},
		devenv.NATSOptions{BatchTimeout: batchTimeout})
	p := fastPublisher(t, e, Config{Window: 256})
	run(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 1000
	// Hold the sender mid-batch (a batch open, with messages on the
	// wire): no message, no commit, past the batch timeout (and past the
	// duplicate window: only reading the stream avoids copies).
	stalled := 0
	for i := 1; stalled == 0; i++ {
		publishRange(ctx, t, p, i, i)
		p.sendMu.Lock()
		p.mu.Lock()
		if i >= 300 && p.fi.open && p.fi.seq > 1 {
			stalled = i
		}
		p.mu.Unlock()
		if stalled == 0 {
			p.sendMu.Unlock()
		}
	}
	time.Sleep(3 * batchTimeout)
	p.sendMu.Unlock()
	// One more event goes to the abandoned batch (refused), then its
	// commit, at once (two ticks: the first finds the batch busy): the
	// events after it must not start a batch of their own before the
	// answers, or they are stored ahead of it.
	publishRange(ctx, t, p, stalled+1, stalled+1)
	p.lingerCommit()
	p.lingerCommit()
	stalled++
	publishRange(ctx, t, p, stalled+1, n)
	drain(t, p, 10*time.Second)
	if failures(p) == 0 {
		t.Fatal("no failure: the abandoned batch went unnoticed")
	}
	got := ids(e.contents(t))
	if want := wantIDs(1, n); !slices.Equal(got, want) {
		t.Fatalf("stream differs from the events offered at %s", firstDiff(got, want))
	}
}

// TestFastIngestBatchingTurnedOff turns the stream's allow_batched off
// while the Publisher publishes in batches: the server refuses the next
// batch message, the Publisher recovers and goes on with ordinary
// publishing; every event once, in order.
func TestFastIngestBatchingTurnedOff(t *testing.T) {
	e := newTestEnv(t, natsjs.StreamConfig{AllowBatchPublish: true})
	p := fastPublisher(t, e, Config{Window: 256})
	run(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 1000
	publishRange(ctx, t, p, 1, 300)
	cfg := e.stream.CachedInfo().Config
	cfg.AllowBatchPublish = false
	if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	publishRange(ctx, t, p, 301, n)
	drain(t, p, 10*time.Second)
	p.mu.Lock()
	off := p.fi.off
	p.mu.Unlock()
	if !off {
		t.Fatal("still publishing in batches to a stream that refuses them")
	}
	got := ids(e.contents(t))
	if want := wantIDs(1, n); !slices.Equal(got, want) {
		t.Fatalf("stream differs from the events offered at %s", firstDiff(got, want))
	}
}

// TestFastIngestNeedsTheStream: a stream without allow_batched, or the
// setting off, publishes as before.
func TestFastIngestNeedsTheStream(t *testing.T) {
	e := newTestEnv(t, natsjs.StreamConfig{})
	if p := e.publisher(t, Config{FastIngest: FastIngestAuto, Stream: e.stream}); p.fi != nil {
		t.Fatal("fast ingest on a stream without allow_batched")
	}
	e2 := newTestEnv(t, natsjs.StreamConfig{AllowBatchPublish: true})
	if p := e2.publisher(t, Config{FastIngest: FastIngestOff, Stream: e2.stream}); p.fi != nil {
		t.Fatal("fast ingest with --fast-ingest off")
	}
	for v, want := range map[string]bool{"2.14.0": true, "2.15.2": true, "2.12.3": false, "3.0.0": true, "v2.14.1-beta": true, "": false} {
		if got := serverAtLeast(v, 2, fastIngestMinor); got != want {
			t.Errorf("serverAtLeast(%q) = %v, want %v", v, got, want)
		}
	}
}

// A message that write finds to be a dead letter leaves its batch: the
// batch's last message is again the one before it, so a linger commit
// waits for that one's confirmation, not the dead letter's (which has a
// PubAck of its own and may settle first, letting the next batch start
// while this one's tail is unconfirmed). Fails when fastUnassign leaves
// fastBatch.last on the dead letter.
func TestFastUnassignRestoresTheLast(t *testing.T) {
	p := &Publisher{fi: &fastBatch{max: fastBatchMax, linger: time.Hour, tick: time.NewTicker(time.Hour)}, ring: make([]slot, 64), mask: 63, head: 1}
	defer p.fi.tick.Stop()
	var sends []fastSend
	for seq := uint64(1); seq <= fastMinBacklog+3; seq++ {
		s := &p.ring[seq&p.mask]
		*s = slot{seq: seq}
		p.next = seq + 1
		sends = append(sends, p.fastAssignLocked(s, false))
	}
	lastSent := sends[len(sends)-1]
	if lastSent.id == 0 {
		t.Fatalf("the last message went out as an ordinary publish, want it in a batch")
	}
	deadSeq := p.fi.last
	p.fastUnassign(deadSeq, lastSent)
	if want := deadSeq - 1; p.fi.last != want {
		t.Fatalf("after the dead letter %d left its batch, the batch's last message is %d, want %d", deadSeq, p.fi.last, want)
	}
}
