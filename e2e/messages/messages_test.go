package messages

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// TestTableLessEvents: events written with outbox.Emit (logical messages)
// are relayed like rows: mixed with rows in one transaction they keep the
// transaction's order, transactions keep commit order (also with
// concurrent writers), a transaction of messages only is confirmed, rolled
// back messages never arrive, other prefixes and non-transactional
// messages are not published (the latter said in the log), and content
// that is no envelope becomes a dead letter recorded in Postgres.
func TestTableLessEvents(t *testing.T) {
	env := suite.NewEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	relay := suite.StartRelay(t, env)
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	var version int
	if err := env.Pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version < 140000 {
		tableLessBefore14(t, env, relay)
		return
	}

	ev := func(typ string) outbox.Event {
		return outbox.Event{AggregateType: "order", AggregateID: "7", EventType: typ, Payload: map[string]any{"t": typ}}
	}
	var want []string // every published id, in commit order for the sequential part
	inTx := func(fn func(tx pgx.Tx) []string, commit bool) []string {
		t.Helper()
		tx, err := env.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		ids := fn(tx)
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return ids
	}
	must := func(ids []string, err error) []string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := env.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	want = append(want, inTx(func(tx pgx.Tx) []string {
		ids := must(outbox.Write(ctx, tx, ev("order.created")))
		ids = append(ids, must(outbox.Emit(ctx, tx, ev("order.paid"), ev("order.packed")))...)
		return append(ids, must(outbox.Write(ctx, tx, ev("order.shipped")))...)
	}, true)...)
	rolledBack := inTx(func(tx pgx.Tx) []string { return must(outbox.Emit(ctx, tx, ev("rolled.back"))) }, false)
	exec(`SELECT pg_logical_emit_message(true, 'other', '{"id": "other-prefix"}')`)
	exec(`SELECT pg_logical_emit_message(false, 'outbox', $1)`,
		`{"id": "non-transactional", "aggregate_type": "o", "aggregate_id": "1", "event_type": "e", "payload": {}}`)
	exec(`SELECT pg_logical_emit_message(true, 'outbox', 'not an envelope')`)
	want = append(want, inTx(func(tx pgx.Tx) []string { return must(outbox.Emit(ctx, tx, ev("order.closed"))) }, true)...)
	sequential := len(want)

	// Concurrent writers, each transaction a random mix of rows and messages.
	var mu sync.Mutex
	var txs [][]string
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			for i := range 25 {
				ids, err := mixedTx(ctx, env, rng, fmt.Sprintf("w%d.t%d", w, i))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				txs = append(txs, ids)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// The last transaction holds messages only: the slot must confirm it.
	last := inTx(func(tx pgx.Tx) []string { return must(outbox.Emit(ctx, tx, ev("the.end"))) }, true)
	total := sequential + 1 + 1 // and the dead letter
	for _, ids := range txs {
		total += len(ids)
	}
	waitStored(t, env, total, time.Minute)
	env.WaitSlotCaughtUp(time.Minute)

	msgs := relaytest.StreamInOrder(t, env)
	pos := map[string]int{}
	var prev pglogrepl.LSN
	var deadLetter *jetstream.RawStreamMsg
	for i, m := range msgs {
		id := m.Header.Get(contract.HeaderMsgID)
		if _, dup := pos[id]; dup {
			t.Errorf("%s stored twice", id)
		}
		pos[id] = i
		if m.Subject == env.DeadSubj {
			deadLetter = m
			continue
		}
		lsn, err := pglogrepl.ParseLSN(m.Header.Get(contract.HeaderCommitLSN))
		if err != nil || lsn < prev {
			t.Errorf("message %d (%s) at commit %s after %s", i, id, lsn, prev)
		}
		prev = lsn
		if m.Header.Get(contract.HeaderSourceSystem) == "" || !strings.HasPrefix(m.Subject, "outbox.order.") {
			t.Errorf("message %d (%s): subject %s, headers %v", i, id, m.Subject, m.Header)
		}
	}
	for i, id := range append(want, last...) {
		p, ok := pos[id]
		if !ok {
			t.Fatalf("event %d (%s) not in the stream", i, id)
		}
		if i > 0 && i < len(want) && p <= pos[want[i-1]] {
			t.Errorf("event %d (%s) at %d, not after the one written before it", i, id, p)
		}
	}
	if m := msgs[pos[want[1]]]; m.Subject != "outbox.order.order%2Epaid" || m.Header.Get(contract.HeaderEventType) != "order.paid" ||
		m.Header.Get(contract.HeaderTxnIndex) != "1" || string(m.Data) != `{"t": "order.paid"}` || m.Header.Get(contract.HeaderCreatedAt) == "" {
		t.Errorf("emitted event: subject %s, headers %v, body %s", m.Subject, m.Header, m.Data)
	}
	for i, id := range want[:4] {
		if got := msgs[pos[id]].Header.Get(contract.HeaderTxnIndex); got != fmt.Sprint(i) {
			t.Errorf("event %d of the mixed transaction has %s %s", i, contract.HeaderTxnIndex, got)
		}
	}
	for _, ids := range txs {
		for j := 1; j < len(ids); j++ {
			if pos[ids[j]] != pos[ids[j-1]]+1 {
				t.Errorf("transaction %v not stored contiguously in order: %s at %d, %s at %d", ids, ids[j-1], pos[ids[j-1]], ids[j], pos[ids[j]])
			}
		}
	}
	for _, id := range append(rolledBack, "other-prefix", "non-transactional") {
		if _, ok := pos[id]; ok {
			t.Errorf("%s was published", id)
		}
	}
	if deadLetter == nil || string(deadLetter.Data) != "not an envelope" || deadLetter.Header.Get(contract.HeaderDeadLetterReason) == "" {
		t.Fatalf("no dead letter for the content that is no envelope: %v", deadLetter)
	}
	var reason string
	if err := env.Pool.QueryRow(ctx, `SELECT reason FROM outbox_relay_dead_letters`).Scan(&reason); err != nil || !strings.Contains(reason, "JSON") {
		t.Errorf("dead letter recorded as %q (%v)", reason, err)
	}
	if !strings.Contains(relay.Logs(), "non-transactional logical message is not atomic") {
		t.Error("the non-transactional message was not reported in the log")
	}
	relay.Drain(30 * time.Second)
}

// mixedTx commits one transaction of one to four events, each written as a
// row or a message at random, and returns their ids in write order.
func mixedTx(ctx context.Context, env *relaytest.Env, rng *rand.Rand, name string) ([]string, error) {
	tx, err := env.Pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	var ids []string
	for i := range 1 + rng.Intn(4) {
		ev := outbox.Event{AggregateType: "order", AggregateID: name, EventType: fmt.Sprintf("step.%d", i), Payload: map[string]any{"i": i}}
		write := outbox.Write
		if rng.Intn(2) == 0 {
			write = outbox.Emit
		}
		got, err := write(ctx, tx, ev)
		if err != nil {
			return nil, err
		}
		ids = append(ids, got...)
	}
	return ids, tx.Commit(ctx)
}

// waitStored waits until the stream holds n messages.
func waitStored(t *testing.T, env *relaytest.Env, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for env.CountStored() < uint64(n) {
		if time.Now().After(deadline) {
			t.Fatalf("the stream holds %d messages after %s, want %d", env.CountStored(), timeout, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tableLessBefore14 is TestTableLessEvents on a server whose pgoutput has
// no messages option (Postgres 13): the relay starts without it, says that
// table-less events are not relayed, and relays rows as before.
func tableLessBefore14(t *testing.T, env *relaytest.Env, relay *relaytest.Relay) {
	t.Helper()
	if !strings.Contains(relay.Logs(), "table-less events (pg_logical_emit_message, outbox.Emit) need Postgres 14 or later") {
		t.Error("the relay did not say that table-less events need Postgres 14")
	}
	ctx := context.Background()
	tx, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	ev := outbox.Event{AggregateType: "order", AggregateID: "1", EventType: "order.created", Payload: map[string]any{}}
	row, err := outbox.Write(ctx, tx, ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.Emit(ctx, tx, ev); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitStored(t, env, 1, time.Minute)
	env.WaitSlotCaughtUp(time.Minute)
	if msgs := relaytest.StreamInOrder(t, env); len(msgs) != 1 || msgs[0].Header.Get(contract.HeaderMsgID) != row[0] {
		t.Errorf("the stream holds %d messages, want the row's event only", len(msgs))
	}
	relay.Drain(30 * time.Second)
}

// TestTableLessEventsAfterKill: a relay killed with table-less events in
// flight restarts and stores each of them once: the replay is matched
// against the stream by position and id as for rows.
func TestTableLessEventsAfterKill(t *testing.T) {
	env := suite.NewEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	relay := suite.StartRelay(t, env)
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	evs := make([]outbox.Event, 1500)
	for i := range evs {
		evs[i] = outbox.Event{AggregateType: "order", AggregateID: fmt.Sprint(i % 20), EventType: "order.line", Payload: map[string]any{"n": i}}
	}
	tx, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	ids, err := outbox.Write(ctx, tx, evs[:10]...)
	if err != nil {
		t.Fatal(err)
	}
	emittedIDs, err := outbox.Emit(ctx, tx, evs[10:]...)
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, emittedIDs...)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed with %d publishes in flight", relay.WaitInFlight(relaytest.FaultWait))
	relay.Kill()
	relay = suite.StartRelay(t, env)
	waitStored(t, env, len(ids), time.Minute)
	env.WaitSlotCaughtUp(time.Minute)
	if n, err := relay.Metric(relaytest.DuplicateAcksMetric); err != nil || n != 0 {
		t.Errorf("%s = %v (%v): events published again", relaytest.DuplicateAcksMetric, n, err)
	}
	msgs := relaytest.StreamInOrder(t, env)
	if len(msgs) != len(ids) {
		t.Errorf("the stream holds %d messages, want %d", len(msgs), len(ids))
	}
	for i := range min(len(msgs), len(ids)) {
		if got := msgs[i].Header.Get(contract.HeaderMsgID); got != ids[i] {
			t.Fatalf("message %d is %s, want %s", i, got, ids[i])
		}
	}
	relay.Drain(30 * time.Second)
}
