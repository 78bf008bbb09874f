package jetstream

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/sink"
)

// TestRoomRefused: every refusal for want of room is held (never a dead
// letter) and named by the limit the stream, its account or its server
// shows, with the nats command that frees it; other errors are not "no
// room".
func TestRoomRefused(t *testing.T) {
	stream := func(edit func(*natsjs.StreamInfo)) *natsjs.StreamInfo {
		info := &natsjs.StreamInfo{Config: natsjs.StreamConfig{Name: "OUTBOX", Discard: natsjs.DiscardNew, Replicas: 1, Storage: natsjs.FileStorage}}
		edit(info)
		return info
	}
	account := &natsjs.AccountInfo{Tier: natsjs.Tier{Store: 1000, Limits: natsjs.AccountLimits{MaxStore: 1024, MaxMemory: -1}}}
	storeFailed := &ServerError{Code: 503, ErrCode: errCodeStoreFailed, Description: "maximum messages exceeded"}
	for _, c := range []struct {
		name    string
		err     error
		info    *natsjs.StreamInfo
		reason  string
		fix     string // in Fix
		figures string // in What
	}{
		{"max_msgs", storeFailed, stream(func(i *natsjs.StreamInfo) { i.Config.MaxMsgs, i.State.Msgs = 200, 200 }),
			RoomMaxMsgs, "nats stream edit OUTBOX --max-msgs 400", "holds 200 messages, its max_msgs is 200"},
		{"max_msgs lowered below what it holds", storeFailed, stream(func(i *natsjs.StreamInfo) { i.Config.MaxMsgs, i.State.Msgs = 100, 300 }),
			RoomMaxMsgs, "--max-msgs 400", "holds 300 messages, its max_msgs is 100"},
		{"max_bytes", storeFailed, stream(func(i *natsjs.StreamInfo) { i.Config.MaxBytes, i.State.Bytes, i.State.Msgs = 1<<20, 1<<20-100, 50 }),
			RoomMaxBytes, "nats stream edit OUTBOX --max-bytes 2097152", "its max_bytes is 1.0 MiB"},
		{"max_bytes at the edge", storeFailed, stream(func(i *natsjs.StreamInfo) { i.Config.MaxBytes, i.State.Bytes = 1<<20, 1<<19 }),
			RoomMaxBytes, "--max-bytes", "max_bytes"},
		{"max_msgs_per_subject", storeFailed, stream(func(i *natsjs.StreamInfo) {
			i.Config.MaxMsgsPerSubject, i.Config.DiscardNewPerSubject = 10, true
		}), RoomMaxMsgsPerSubject, "--max-msgs-per-subject 20", "max_msgs_per_subject (10)"},
		{"a disk error", storeFailed, stream(func(*natsjs.StreamInfo) {}), RoomStore, "check the disk", "could not store"},
		{"stream unreadable", storeFailed, nil, RoomStore, "check the disk", "could not store"},
		{"account quota", &ServerError{Code: 400, ErrCode: errCodeAccountResources, Description: "resource limits exceeded for account"},
			stream(func(*natsjs.StreamInfo) {}), RoomAccountStorage, "max_file", "file storage quota (1000 B of 1.0 KiB"},
		{"account memory quota", &ServerError{Code: 400, ErrCode: errCodeAccountResources},
			stream(func(i *natsjs.StreamInfo) { i.Config.Storage = natsjs.MemoryStorage }), RoomAccountMemory, "max_mem", "memory storage quota"},
		{"server storage", &ServerError{Code: 503, ErrCode: errCodeInsufficientResources, Description: "insufficient resources"},
			stream(func(i *natsjs.StreamInfo) { i.Cluster = &natsjs.ClusterInfo{Leader: "n2"} }), RoomServerStorage, "max_file_store", "NATS server n2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if Permanent(c.err) {
				t.Fatalf("%v is permanent: the event would be dead-lettered", c.err)
			}
			if !noRoom(c.err) || failureReason(c.err) != "stream_full" {
				t.Errorf("%v: noRoom %v, failure reason %q", c.err, noRoom(c.err), failureReason(c.err))
			}
			b := roomRefused(c.err, c.info, account, "OUTBOX", 200)
			if b == nil {
				t.Fatal("no block")
			}
			if b.Reason != c.reason || b.Stream != "OUTBOX" || !strings.Contains(b.Fix, c.fix) || !strings.Contains(b.What, c.figures) {
				t.Errorf("got %+v\nwant reason %s, fix with %q, what with %q", b, c.reason, c.fix, c.figures)
			}
		})
	}
	for _, err := range []error{ErrAckTimeout, ErrNoResponders, ErrDisconnected,
		&ServerError{ErrCode: errCodeMessageTooLarge}, &ServerError{ErrCode: 10071}} {
		if noRoom(err) || roomRefused(err, stream(func(*natsjs.StreamInfo) {}), account, "OUTBOX", 1) != nil {
			t.Errorf("%v counts as no room", err)
		}
	}
}

// TestQuorum: a clustered stream has room while its leader hears from a
// quorum of its replicas; without a leader, or with replicas silent or
// offline, it has none, and the block names them.
func TestQuorum(t *testing.T) {
	peer := func(name string, current bool, active time.Duration) *natsjs.PeerInfo {
		return &natsjs.PeerInfo{Name: name, Current: current, Active: active}
	}
	info := func(leader string, peers ...*natsjs.PeerInfo) *natsjs.StreamInfo {
		return &natsjs.StreamInfo{Config: natsjs.StreamConfig{Name: "OUTBOX", Replicas: 3}, Cluster: &natsjs.ClusterInfo{Leader: leader, Replicas: peers}}
	}
	for _, c := range []struct {
		name string
		info *natsjs.StreamInfo
		lost string // "" when the stream has its quorum
	}{
		{"not clustered", &natsjs.StreamInfo{Config: natsjs.StreamConfig{Name: "OUTBOX"}}, ""},
		{"all current", info("n1", peer("n2", true, time.Second), peer("n3", true, time.Second)), ""},
		{"one replica down", info("n1", peer("n2", true, time.Second), peer("n3", false, time.Minute)), ""},
		{"two replicas silent", info("n1", peer("n2", true, 8*time.Second), peer("n3", true, 8*time.Second)), "n2, n3"},
		{"two replicas offline", info("n1", &natsjs.PeerInfo{Name: "n2", Offline: true}, peer("n3", false, time.Minute)), "n2, n3"},
		{"no leader", info("", peer("n1", false, time.Minute), peer("n2", false, time.Minute), peer("n3", false, time.Minute)), "n1, n2, n3"},
	} {
		b := quorum(c.info)
		switch {
		case c.lost == "" && b != nil:
			t.Errorf("%s: %+v", c.name, b)
		case c.lost != "" && (b == nil || b.Reason != RoomQuorum || !strings.Contains(b.What, c.lost) || !strings.Contains(b.Fix, "nats server report jetstream")):
			t.Errorf("%s: %+v, want a quorum block naming %s", c.name, b, c.lost)
		}
	}
	// Just after a failure the relay counts replicas silent for half an
	// ack timeout as lost.
	recent := info("n1", peer("n2", true, 1500*time.Millisecond), peer("n3", true, 1500*time.Millisecond))
	if quorum(recent) != nil || quorumWithin(recent, time.Second) == nil {
		t.Errorf("replicas silent for 1.5 s: quorum %v, within 1 s %v", quorum(recent), quorumWithin(recent, time.Second))
	}
	unavailableErr := &natsjs.APIError{Code: 503, ErrorCode: errCodeClusterNotAvailable, Description: "JetStream system temporarily unavailable"}
	if b := unavailable("OUTBOX", unavailableErr); b == nil || b.Reason != RoomQuorum {
		t.Errorf("JetStream temporarily unavailable: %+v", b)
	}
	if b := unavailable("OUTBOX", errors.New("timeout")); b != nil {
		t.Errorf("a timeout: %+v", b)
	}
}

// TestPublisherNamesTheLimit: on a real server, a stream with max_bytes
// and discard new fills up. The Publisher holds the event it refuses,
// sets outbox_relay_stream_blocked{reason="max_bytes"} and only that,
// confirms nothing past it, and once the limit is raised stores
// everything once, none as a dead letter, and clears the gauge; status's
// CheckRoom sees the same limit.
func TestPublisherNamesTheLimit(t *testing.T) {
	e := newTestEnv(t, natsjs.StreamConfig{Duplicates: time.Minute, MaxBytes: 4096, Discard: natsjs.DiscardNew})
	tmpl, err := sink.ParseTemplate(testTemplate)
	if err != nil {
		t.Fatal(err)
	}
	metrics := NewMetrics(prometheus.NewRegistry())
	p, err := NewPublisher(e.nc, Config{Subject: tmpl, DeadLetterSubject: testDeadLetter, Window: 64, AckTimeout: time.Second, Stream: e.stream},
		zerolog.Nop(), metrics)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	gauge := func(reason string) float64 {
		return testutil.ToFloat64(metrics.Blocked.WithLabelValues(testStream, reason))
	}
	for _, r := range RoomReasons() {
		if g := gauge(r); g != 0 {
			t.Errorf("blocked{reason=%q} = %v before anything happened", r, g)
		}
	}
	run(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 40
	for i := 1; i <= n; i++ { // the window holds them all
		if _, ok := p.Offer(event(i, nil)); !ok {
			t.Fatalf("offer %d: window full", i)
		}
	}
	waitFor(t, 20*time.Second, "the publisher to name max_bytes", func() bool { return gauge(RoomMaxBytes) == 1 })
	for _, r := range RoomReasons() {
		if g := gauge(r); r != RoomMaxBytes && g != 0 {
			t.Errorf("blocked{reason=%q} = %v beside max_bytes", r, g)
		}
	}
	held := p.AckedThrough()
	if held >= n || !p.outage() {
		t.Fatalf("acked through %d of %d, outage %v: the stream refused nothing", held, n, p.outage())
	}
	if b := CheckRoom(ctx, e.js, info(t, e)); b == nil || b.Reason != RoomMaxBytes {
		t.Errorf("CheckRoom on the full stream: %+v", b)
	}
	time.Sleep(2 * time.Second) // held through several retries
	if got := p.AckedThrough(); got != held {
		t.Errorf("acked through %d while the stream had no room, was %d", got, held)
	}

	cfg := e.stream.CachedInfo().Config
	cfg.MaxBytes = -1
	if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	drain(t, p, 20*time.Second)
	if g := gauge(RoomMaxBytes); g != 0 {
		t.Errorf("blocked{reason=max_bytes} = %v once stored", g)
	}
	if got := ids(e.contents(t)); strings.Join(got, ",") != strings.Join(wantIDs(1, n), ",") {
		t.Errorf("stream holds %v, want events 1..%d once each, in order", got, n)
	}
	if b := CheckRoom(ctx, e.js, info(t, e)); b != nil {
		t.Errorf("CheckRoom after the limit was raised: %+v", b)
	}
}

func info(t *testing.T, e *testEnv) *natsjs.StreamInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	i, err := e.stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return i
}
