package replication_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/replication"
)

// holdTestTimeout is the wal_sender_timeout of the cluster these tests
// share: short, so that a relay that stays silent is cut within seconds.
const holdTestTimeout = 2 * time.Second

// TestSessionStart runs the cases about the start of a session and the
// status updates the walsender needs, on one cluster with a short
// wal_sender_timeout.
func TestSessionStart(t *testing.T) {
	cluster := relaytest.PrivateCluster(t, map[string]string{
		"wal_sender_timeout": fmt.Sprint(holdTestTimeout.Milliseconds()) + "ms",
	})
	t.Run("BeforeSessionRunsOnlyWhileHoldingTheSlot", func(t *testing.T) { testBeforeSessionHoldsTheSlot(t, cluster) })
	t.Run("LongBeforeSessionKeepsTheConnection", func(t *testing.T) { testLongBeforeSession(t, cluster) })
	t.Run("SlowTransactionKeepsTheConnection", func(t *testing.T) { testSlowTransaction(t, cluster) })
}

// holdEnv is a database of the shared cluster with the relay's slot.
type holdEnv struct {
	*relaytest.Env
	cfg replication.Config
}

func newHoldEnv(t *testing.T, cluster relaytest.Server) holdEnv {
	env := relaytest.NewEnv(t, cluster)
	_, repl, err := replication.ParseConnString(env.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	noop := func(context.Context, pgx.Tx, pglogrepl.LSN) error { return nil }
	if _, err := replication.CreateSlot(context.Background(), repl, env.Pool, env.Slot, replication.SlotOptions{}, noop); err != nil {
		t.Fatal(err)
	}
	return holdEnv{Env: env, cfg: replication.Config{Repl: repl, Slot: env.Slot, Publication: env.Pub, Table: env.Table}}
}

// runningStream is a Stream running on its own goroutine until stop.
type runningStream struct {
	*replication.Stream
	reg  *prometheus.Registry
	logs *relaytest.SyncBuffer
	stop func() error
}

func startStream(t *testing.T, env holdEnv, cfg replication.Config, h replication.Handler) *runningStream {
	t.Helper()
	logs := &relaytest.SyncBuffer{}
	reg := prometheus.NewRegistry()
	stream, err := replication.NewStream(cfg, env.Pool, zerolog.New(logs), replication.NewMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- stream.Run(ctx, h) }()
	var once sync.Once
	var runErr error
	rs := &runningStream{Stream: stream, reg: reg, logs: logs}
	rs.stop = func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}
	t.Cleanup(func() {
		if err := rs.stop(); err != nil {
			t.Errorf("stream: %v", err)
		}
		if t.Failed() {
			t.Logf("stream log:\n%s", logs.String())
		}
	})
	return rs
}

func (r *runningStream) reconnects(t *testing.T) float64 {
	return counterValue(t, r.reg, "outbox_relay_replication_reconnects_total")
}

// testBeforeSessionHoldsTheSlot: a second stream on a slot another one
// streams from waits, and learns what the stream holds (BeforeSession)
// only once it holds the slot itself. Read before, while the first one
// still published, that knowledge goes stale: the events the first one
// stored in between would be published again.
func testBeforeSessionHoldsTheSlot(t *testing.T, cluster relaytest.Server) {
	env := newHoldEnv(t, cluster)
	first := startStream(t, env, env.cfg, &recordingHandler{})
	waitFor(t, 30*time.Second, "first stream streaming", first.Streaming)

	var calls, whileOther atomic.Int32
	var holderPID atomic.Int32
	cfg := env.cfg
	cfg.BeforeSession = func(ctx context.Context, start replication.SessionStart) error {
		info := start.Slot
		if start.System.SystemID == "" {
			return fmt.Errorf("BeforeSession without the system's identity: %+v", start.System)
		}
		calls.Add(1)
		now, err := replication.LookupSlot(ctx, env.Pool, env.Slot)
		if err != nil {
			return err
		}
		if first.Streaming() {
			whileOther.Add(1)
		}
		holderPID.Store(now.ActivePID)
		if !now.Active || now.ConfirmedFlush != info.ConfirmedFlush {
			return fmt.Errorf("BeforeSession ran on a slot it does not hold: %+v (given %+v)", now, info)
		}
		return nil
	}
	second := startStream(t, env, cfg, &recordingHandler{})
	waitFor(t, 30*time.Second, "second stream waiting as a standby", func() bool {
		return strings.Contains(second.logs.String(), "waiting as a standby")
	})
	// A negative check: the standby retries at most every 2 s, so it has
	// had several rounds in which to run BeforeSession too early.
	time.Sleep(5 * time.Second)
	if n := calls.Load(); n != 0 {
		t.Fatalf("BeforeSession ran %d times while another stream held the slot", n)
	}
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "second stream streaming", second.Streaming)
	if whileOther.Load() != 0 || calls.Load() != 1 {
		t.Errorf("BeforeSession: %d calls, %d while the first stream streamed", calls.Load(), whileOther.Load())
	}
	if holderPID.Load() == 0 {
		t.Error("the slot had no holder while BeforeSession ran")
	}
}

// testLongBeforeSession: a BeforeSession that takes several times
// wal_sender_timeout (a long read of the stream's tail) does not cost the
// connection, and the session then streams what was written meanwhile.
func testLongBeforeSession(t *testing.T, cluster relaytest.Server) {
	env := newHoldEnv(t, cluster)
	cfg := env.cfg
	cfg.BeforeSession = func(ctx context.Context, _ replication.SessionStart) error {
		select {
		case <-time.After(3 * holdTestTimeout):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	env.Backlog(100)
	h := &recordingHandler{}
	s := startStream(t, env, cfg, h)
	waitFor(t, time.Minute, "the backlog streamed", func() bool { return h.count() == 100 })
	if n := s.reconnects(t); n != 0 {
		t.Errorf("the stream reconnected %v times while it prepared the session", n)
	}
}

// testSlowTransaction: a relay working slowly through one large
// transaction reads the walsender's requests for a reply only after the
// megabytes queued before them, later than wal_sender_timeout; with a
// status interval longer than the timeout only its own clock keeps the
// connection. The interval is capped at half the timeout.
func testSlowTransaction(t *testing.T, cluster relaytest.Server) {
	env := newHoldEnv(t, cluster)
	cfg := env.cfg
	cfg.StatusInterval = time.Minute
	h := &slowHandler{per: 200 * time.Microsecond}
	s := startStream(t, env, cfg, h)
	waitFor(t, 30*time.Second, "streaming", s.Streaming)
	const rows = 15_000 // at least 3 s at the handler's pace: 1.5 × wal_sender_timeout
	env.Exec(`INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'bulk', 'b1', 'imported', jsonb_build_object('n', g, 'pad', repeat('x', 200)) FROM generate_series(1, $1::int) g`, rows)
	began := time.Now()
	waitFor(t, 3*time.Minute, "the transaction streamed", func() bool { return h.count() >= rows })
	took := time.Since(began)
	t.Logf("the %d-row transaction took %s to stream", rows, took.Round(time.Millisecond))
	if took < 2*holdTestTimeout {
		t.Fatalf("streaming took %s, less than twice wal_sender_timeout: the test proves nothing; slow the handler", took)
	}
	if n := s.reconnects(t); n != 0 {
		t.Errorf("the walsender cut the connection %v times while the relay worked through one transaction", n)
	}
}

// slowHandler takes each event after a pause: a relay busy elsewhere.
type slowHandler struct {
	recordingHandler
	per time.Duration
}

func (h *slowHandler) Event(ev *decode.Event) bool {
	time.Sleep(h.per)
	return h.recordingHandler.Event(ev)
}
