package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/core"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/startup"
)

// syncBuffer is a log sink written from several goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) all() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *syncBuffer) line(msg string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	for l := range strings.Lines(b.buf.String()) {
		if strings.Contains(l, `"message":"`+msg+`"`) {
			return l
		}
	}
	return ""
}

// A relay resuming its slot over a backlog logs, once, how long its
// start-up took until the first PubAck, phase by phase; the replication
// connection is opened beside the Postgres checks, not after them, and
// the first session streams on it (no second dial).
func TestStartUpTraceOnResume(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	cfg := testConfig(t, env)
	mustTakeUp(t, env, cfg, checkpoint.Bootstrap)
	env.Tx(relaytest.NewRow("order", "1", "created", `{}`))
	env.Tx(relaytest.NewRow("order", "2", "created", `{}`))

	nc, err := nats.Connect(env.NATSURL, nats.MaxReconnects(-1), nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	out := &syncBuffer{}
	log := zerolog.New(out)
	r, err := New(cfg, core.Deps{NATS: nc, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(startup.NewContext(context.Background(), startup.New(time.Now(), log)))
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	}()
	var line string
	waitFor(t, time.Minute, "the start-up line", func() bool {
		line = out.line("start-up took")
		return line != ""
	})
	var got struct {
		Took   float64           `json:"took"`
		Until  string            `json:"until"`
		Phases map[string]string `json:"phases"`
	}
	if err := json.Unmarshal([]byte(line), &got); err != nil {
		t.Fatalf("start-up line %s: %v", line, err)
	}
	if got.Until != "first PubAck" || got.Took <= 0 {
		t.Errorf("start-up line %s: want a duration until the first PubAck", line)
	}
	for _, phase := range []string{"pg_pool", "repl_open", "nats_stream", "lock_connect", "setup_check", "take_up_lock", "decide", "held_slot", "tail_read"} {
		if got.Phases[phase] == "" {
			t.Errorf("start-up line %s: no phase %s", line, phase)
		}
	}
	// A second replication connection would show as a phase of its own.
	for _, phase := range []string{"record_origin"} {
		if got.Phases[phase] != "" {
			t.Errorf("start-up line %s: phase %s, which the take-up no longer needs", line, phase)
		}
	}
	if strings.Count(line, "repl_open") != 1 {
		t.Errorf("start-up line %s: the first session dialed again instead of using the connection opened ahead", line)
	}
	replAt, setupAt := phaseStart(t, got.Phases["repl_open"]), phaseStart(t, got.Phases["setup_check"])
	if replAt > setupAt {
		t.Errorf("the replication connection was opened at %s, after the Postgres checks started (%s): it should be opened beside them", replAt, setupAt)
	}
}

// phaseStart reads the start of a phase as the start-up line writes it
// ("<took> at <start>").
func phaseStart(t *testing.T, s string) time.Duration {
	t.Helper()
	_, at, ok := strings.Cut(s, " at ")
	d, err := time.ParseDuration(at)
	if !ok || err != nil {
		t.Fatalf("phase %q: want \"<took> at <start>\"", s)
	}
	return d
}

// A relay started before Postgres answers waits for it (OpenPool), and
// then streams: the replication connection, tried ahead while Postgres
// did not answer yet, is tried again once it does.
func TestStartBeforePostgresAnswers(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	cfg := testConfig(t, env)
	mustTakeUp(t, env, cfg, checkpoint.Bootstrap)
	env.Tx(relaytest.NewRow("order", "1", "created", `{}`))

	u, err := url.Parse(env.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.Host = free.Addr().String()
	free.Close() // nothing answers there until the proxy below listens
	cfg.PGURL = u.String()

	nc, err := nats.Connect(env.NATSURL, nats.MaxReconnects(-1), nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	out := &syncBuffer{}
	r, err := New(cfg, core.Deps{NATS: nc, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	trace := startup.New(time.Now(), zerolog.New(out).Level(zerolog.DebugLevel))
	ctx, cancel := context.WithCancel(startup.NewContext(context.Background(), trace))
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	}()
	// The replication connection was tried (and failed) while nothing
	// answered.
	waitFor(t, time.Minute, "the first attempt at the replication connection", func() bool {
		return strings.Contains(out.all(), `"phase":"repl_open"`)
	})
	proxy(t, u.Host, target)
	waitFor(t, time.Minute, "the start-up line", func() bool {
		select {
		case err := <-done:
			done <- nil
			t.Fatalf("the relay stopped: %v", err)
		default:
		}
		return out.line("start-up took") != ""
	})
	env.WaitStored(1, 30*time.Second)
}

// proxy forwards connections to addr to target until the test ends.
func proxy(t *testing.T, addr, target string) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	keep := func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		conns = append(conns, c)
	}
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			keep(c)
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			keep(up)
			wg.Go(func() { _, _ = io.Copy(up, c); up.Close() })
			wg.Go(func() { _, _ = io.Copy(c, up); c.Close() })
		}
	})
}
