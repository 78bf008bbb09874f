package jetstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/sink"

	"github.com/jackc/pglogrepl"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
)

const (
	testStream     = "OUTBOX"
	testDeadLetter = "outbox-dlq"
	testTemplate   = "outbox.{aggregate_type}.{event_type}"
)

// testEnv is an in-process JetStream server with the relay's stream, and a
// client connected the way the relay connects: reconnect forever, no
// reconnect buffer.
type testEnv struct {
	srv    *devenv.NATS
	dialer *gatedDialer
	nc     *nats.Conn
	js     natsjs.JetStream
	stream natsjs.Stream
}

func newTestEnv(t *testing.T, cfg natsjs.StreamConfig, server ...devenv.NATSOptions) *testEnv {
	t.Helper()
	opts := devenv.NATSOptions{}
	if len(server) > 0 {
		opts = server[0]
	}
	opts.StoreDir = t.TempDir()
	srv, err := devenv.StartNATS(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	dialer := &gatedDialer{}
	nc, js := connectJS(t, srv.URL(), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1),
		nats.ReconnectWait(50*time.Millisecond), nats.ReconnectJitter(0, 0), nats.SetCustomDialer(dialer))
	cfg.Name = testStream
	if cfg.Subjects == nil {
		cfg.Subjects = []string{"outbox.>", testDeadLetter}
	}
	cfg.Storage = natsjs.FileStorage
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := js.CreateStream(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &testEnv{srv: srv, dialer: dialer, nc: nc, js: js, stream: stream}
}

// connectJS connects to url with opts, for the test's duration, and
// returns the connection and its JetStream context.
func connectJS(t *testing.T, url string, opts ...nats.Option) (*nats.Conn, natsjs.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// gatedDialer refuses connections while closed, so that a test decides
// when the client may reconnect, and can cut the connections it made or
// make them lose what the client writes.
type gatedDialer struct {
	closed atomic.Bool
	mu     sync.Mutex
	conns  []*testConn
	lost   []byte // what blackholed connections swallowed
}

func (d *gatedDialer) Dial(network, address string) (net.Conn, error) {
	if d.closed.Load() {
		return nil, errors.New("test: connections refused")
	}
	c, err := (&net.Dialer{Timeout: 2 * time.Second}).Dial(network, address)
	if err != nil {
		return nil, err
	}
	tc := &testConn{Conn: c, d: d}
	d.mu.Lock()
	d.conns = append(d.conns, tc)
	d.mu.Unlock()
	return tc, nil
}

// cut closes the connections and refuses new ones.
func (d *gatedDialer) cut() {
	d.closed.Store(true)
	d.drop()
}

// drop closes the connections; the client may reconnect at once.
func (d *gatedDialer) drop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		_ = c.Close()
	}
	d.conns = nil
}

// blackhole makes the open connections lose everything the client writes
// from now on, as a network that fails silently does.
func (d *gatedDialer) blackhole() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.blackhole.Store(true)
	}
}

// swallowed reports whether a blackholed connection lost bytes containing s.
func (d *gatedDialer) swallowed(s string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return bytes.Contains(d.lost, []byte(s))
}

// testConn is a client connection a test can blackhole.
type testConn struct {
	net.Conn
	d         *gatedDialer
	blackhole atomic.Bool
}

func (c *testConn) Write(b []byte) (int, error) {
	if !c.blackhole.Load() {
		return c.Conn.Write(b)
	}
	c.d.mu.Lock()
	c.d.lost = append(c.d.lost, b...)
	c.d.mu.Unlock()
	return len(b), nil
}

// stop cuts the client off, then shuts the server down, keeping its
// store; the client cannot reconnect until start. The client is cut first
// so that the outage starts at one instant: in a graceful shutdown
// JetStream stops before client connections close, and requests in
// between get "no responders" or no reply at all (TestRecoveryRequestDropped
// covers that case).
func (e *testEnv) stop() {
	e.dialer.cut()
	e.srv.Stop()
}

// start starts the server again on the same port and store and lets the
// client reconnect once JetStream answers for the stream.
func (e *testEnv) start(t *testing.T) {
	t.Helper()
	if err := e.srv.Start(); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(e.srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "JetStream to serve the stream after the restart", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_, err := js.Stream(ctx, testStream)
		return err == nil
	})
	e.dialer.closed.Store(false)
}

// publisher returns a Publisher on the environment's connection, with
// cfg's fields filled where they are left zero.
func (e *testEnv) publisher(t *testing.T, cfg Config) *Publisher {
	t.Helper()
	tmpl, err := sink.ParseTemplate(testTemplate)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Subject = tmpl
	if cfg.DeadLetterSubject == "" {
		cfg.DeadLetterSubject = testDeadLetter
	}
	p, err := NewPublisher(e.nc, cfg, zerolog.Nop(), NewMetrics(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// run drives p.Run until the test ends.
func run(t *testing.T, p *Publisher) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// event returns the i-th test event: one aggregate, commit positions in
// the order of i.
func event(i int, payload []byte) *decode.Event {
	if payload == nil {
		payload = fmt.Appendf(nil, `{"n":%d}`, i)
	}
	return &decode.Event{
		ID:            fmt.Sprintf("ev-%05d", i),
		AggregateType: "order",
		AggregateID:   "agg-1",
		EventType:     "created",
		Payload:       payload,
		CreatedAt:     "2024-05-01T10:00:00Z",
		Position:      decode.Position{CommitLSN: pglogrepl.LSN(0x1000 + 0x100*i), Index: 0},
	}
}

// storedMsg is one message of the stream, in stream order.
type storedMsg struct {
	seq     uint64
	subject string
	id      string
	header  nats.Header
}

// contents reads every message the stream holds.
func (e *testEnv) contents(t *testing.T) []storedMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var msgs []storedMsg
	err := ForEach(ctx, e.stream, nil, Read{HeadersOnly: true}, func(m *natsjs.RawStreamMsg) bool {
		msgs = append(msgs, storedMsg{seq: m.Sequence, subject: m.Subject, id: m.Header.Get(contract.HeaderMsgID), header: m.Header})
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// ids returns the Nats-Msg-Ids of msgs.
func ids(msgs []storedMsg) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.id
	}
	return out
}

// publishRange publishes events from..to; those numbered in dead are dead
// letters (their aggregate_id is NULL).
func publishRange(ctx context.Context, t *testing.T, p *Publisher, from, to int, dead ...int) {
	t.Helper()
	for i := from; i <= to; i++ {
		ev := event(i, nil)
		if slices.Contains(dead, i) {
			ev.Problem = "aggregate_id is NULL"
		}
		if _, err := p.Publish(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
}

// wantIDs returns the ids of events from..to.
func wantIDs(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, event(i, nil).ID)
	}
	return out
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func drain(t *testing.T, p *Publisher, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
}

// replyGate sits between the server's PubAcks and the Publisher: while
// held, replies are kept back instead of reaching onReply, so a test
// decides when (and whether) each one arrives; while dropping, they are
// lost.
type replyGate struct {
	p       *Publisher
	mu      sync.Mutex
	held    []*nats.Msg
	mode    gateMode
	dropped int // replies lost while dropping
}

type gateMode int

const (
	gatePass gateMode = iota
	gateHold
	gateDrop
)

// gateReplies replaces p's PubAck subscription with a gate in mode.
func gateReplies(t *testing.T, p *Publisher, mode gateMode) *replyGate {
	t.Helper()
	g := &replyGate{p: p, mode: mode}
	if err := p.sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	sub, err := p.nc.Subscribe(p.inbox+"*.*", g.onReply)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	p.sub = sub
	// The subscription must be known to the server before any publish.
	if err := p.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return g
}

func (g *replyGate) onReply(m *nats.Msg) {
	g.mu.Lock()
	switch g.mode {
	case gateHold:
		g.held = append(g.held, m)
		g.mu.Unlock()
		return
	case gateDrop:
		g.dropped++
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	g.p.onReply(m)
}

// set switches the gate's mode; held replies stay held.
func (g *replyGate) set(mode gateMode) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mode = mode
}

// heldCount returns how many replies are held back.
func (g *replyGate) heldCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.held)
}

// droppedCount returns how many replies were lost while dropping.
func (g *replyGate) droppedCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dropped
}

// take removes and returns the held replies.
func (g *replyGate) take() []*nats.Msg {
	g.mu.Lock()
	defer g.mu.Unlock()
	held := g.held
	g.held = nil
	return held
}

// open delivers the held replies in order and lets later ones through.
func (g *replyGate) open() {
	g.mu.Lock()
	held := g.held
	g.held, g.mode = nil, gatePass
	g.mu.Unlock()
	for _, m := range held {
		g.p.onReply(m)
	}
}

// lastSeq returns the stream's last sequence.
func (e *testEnv) lastSeq(t *testing.T) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := e.stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}
