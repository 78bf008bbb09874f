package replication_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
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

// silenceTestTimeout is the test cluster's wal_sender_timeout. The relay
// must not give up on the connection before it (plus a margin): the
// walsender answers only every half of it while it decodes a transaction
// that yields nothing for the relay.
const silenceTestTimeout = 2 * time.Second

// TestSilentDecodingKeepsTheConnection: a large transaction on a table
// outside the publication keeps the walsender busy, sending nothing for the
// relay, for longer than wal_sender_timeout plus the relay's margin. The
// stream must ride it out on the walsender's keepalives (no reconnect: a
// reconnect replays the same transaction from the start, and gives up
// again, forever) and deliver the outbox insert committed after it.
func TestSilentDecodingKeepsTheConnection(t *testing.T) {
	cluster := relaytest.PrivateCluster(t, map[string]string{
		"wal_sender_timeout": fmt.Sprint(silenceTestTimeout.Milliseconds()) + "ms",
		// Spill the transaction to disk as a real backfill would.
		"logical_decoding_work_mem": "64kB",
	})
	env := relaytest.NewEnv(t, cluster)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	_, repl, err := replication.ParseConnString(env.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	noop := func(context.Context, pgx.Tx, pglogrepl.LSN) error { return nil }
	if _, err := replication.CreateSlot(ctx, repl, env.Pool, env.Slot, replication.SlotOptions{}, noop); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Pool.Exec(ctx, `CREATE TABLE backfill (id BIGINT, pad TEXT)`); err != nil {
		t.Fatal(err)
	}

	var logs relaytest.SyncBuffer
	reg := prometheus.NewRegistry()
	metrics := replication.NewMetrics(reg)
	reconnects := func() float64 { return counterValue(t, reg, "outbox_relay_replication_reconnects_total") }
	stream, err := replication.NewStream(replication.Config{Repl: repl, Slot: env.Slot, Publication: env.Pub, Table: env.Table},
		env.Pool, zerolog.New(&logs), metrics)
	if err != nil {
		t.Fatal(err)
	}
	h := &recordingHandler{}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- stream.Run(sctx, h) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("stream: %v", err)
		}
		if t.Failed() {
			t.Logf("stream log:\n%s", logs.String())
		}
	}()
	waitFor(t, 30*time.Second, "streaming", stream.Streaming)

	// One transaction whose decoding at commit outlasts the relay's limit
	// (wal_sender_timeout + margin); it is measured below, and made twice
	// as large while the machine decodes it faster than the limit.
	limit := silenceTestTimeout + max(silenceTestTimeout/2, 2*time.Second)
	rows := 5_000_000
	for attempt := 1; ; attempt++ {
		took := decodeBackfill(ctx, t, env, h, reconnects, rows, attempt)
		t.Logf("decoding the %d-row transaction took %s", rows, took.Round(time.Millisecond))
		if took >= limit {
			break
		}
		if attempt == 3 {
			t.Fatalf("decoding %d rows took %s, less than the relay's silence limit of %s: the test proves nothing; raise rows", rows, took, limit)
		}
		rows *= 2
	}
	if n := reconnects(); n > 0 {
		t.Errorf("the relay reconnected %v times", n)
	}
	if ev := h.first(); ev.EventType != "after.backfill" {
		t.Errorf("first event %+v", ev)
	}
}

// decodeBackfill commits a transaction of rows rows on a table outside the
// publication, then an outbox insert, and returns how long after the
// backfill's commit the insert reached h: the walsender's silent decoding.
// It fails the test when the relay reconnected meanwhile.
func decodeBackfill(ctx context.Context, t *testing.T, env *relaytest.Env, h *recordingHandler, reconnects func() float64, rows, attempt int) time.Duration {
	t.Helper()
	if _, err := env.Pool.Exec(ctx, `TRUNCATE backfill`); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Pool.Exec(ctx, `INSERT INTO backfill SELECT g, 'x' FROM generate_series(1, $1::bigint) g`, rows); err != nil {
		t.Fatal(err)
	}
	committed := time.Now()
	seen := h.count()
	if _, err := env.Pool.Exec(ctx, `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
		VALUES ($1, 'order', '1', 'after.backfill', '{}')`, fmt.Sprintf("22222222-2222-2222-2222-%012d", attempt)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for h.count() == seen {
		if n := reconnects(); n > 0 {
			t.Fatalf("the relay dropped the replication connection %v times while the walsender decoded a transaction it does not publish (%s after its commit)",
				n, time.Since(committed).Round(time.Millisecond))
		}
		if time.Now().After(deadline) {
			t.Fatal("the outbox insert committed after the backfill never arrived")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(committed)
}

// recordingHandler takes every event at once and confirms every commit.
type recordingHandler struct {
	mu     sync.Mutex
	events []decode.Event
	end    pglogrepl.LSN
}

func (h *recordingHandler) Event(ev *decode.Event) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := *ev
	e.Payload = bytes.Clone(ev.Payload)
	h.events = append(h.events, e)
	return true
}

func (h *recordingHandler) Room() <-chan struct{} { return nil }

func (h *recordingHandler) Commit(end pglogrepl.LSN) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.end = end
}

func (h *recordingHandler) Idle(pglogrepl.LSN) {}

func (h *recordingHandler) Flushed(context.Context, bool) (pglogrepl.LSN, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.end, nil
}

func (h *recordingHandler) Drain(context.Context) error { return nil }

func (h *recordingHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.events)
}

func (h *recordingHandler) first() decode.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.events[0]
}

// counterValue reads a counter from reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}

// waitFor is relaytest.WaitFor under the name this package's tests use.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	relaytest.WaitFor(t, timeout, what, cond)
}
