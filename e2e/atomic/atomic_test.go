package atomic

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

const (
	headerBatchID  = "Nats-Batch-Id"
	headerBatchSeq = "Nats-Batch-Sequence"
)

// TestAtomicRelayKilled: with --atomic-transactions, under a load of
// transactions of up to ten rows, the relay is SIGKILLed three times with
// a 600-row transaction's batch in flight, and each restart is held past
// the stream's 1 s duplicate window, so that only the relay's resume logic
// (the take-up's Holdings) keeps it from storing a second copy. Then: 0
// missing, 0 duplicated, order kept, and every transaction stored whole,
// as one batch at consecutive stream sequences.
func TestAtomicRelayKilled(t *testing.T) {
	env := suite.NewEnv(t)
	if env.DuplicateWindow != time.Second {
		t.Fatalf("duplicate window %s, want the 1 s the case is built on", env.DuplicateWindow)
	}
	relay := suite.StartRelay(t, env, "--atomic-transactions")
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	w, stop := relaytest.Load(t, env)
	w.WaitTx(t, 20, relaytest.FaultWait)
	skipped := 0
	for i := 0; i < 3; i++ {
		m := relaytest.InFlight(t, env, relay, 600)
		relay.Kill()
		if n := m[relaytest.DuplicateAcksMetric]; n != 0 {
			t.Errorf("relay %d had %v publishes acknowledged as duplicates when killed", i, n)
		}
		time.Sleep(env.DuplicateWindow + 500*time.Millisecond) // past the window
		relay = suite.StartRelay(t, env, "--atomic-transactions")
		relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
		skipped += relay.CountLog(relaytest.LogSkipStored)
		w.WaitTx(t, w.CommittedTx()+10, relaytest.FaultWait)
	}
	stop()
	relaytest.Settle(t, env, relay, w, relaytest.Expect{MinTx: 50})
	if skipped == 0 {
		t.Error("no restarted relay skipped events the stream held: the kills never landed between a PubAck and the slot's confirmation, and the resume logic this case is about did not run")
	}
	requireWholeTransactions(t, env, 0)
}

// requireWholeTransactions fails the test unless every transaction of two
// events or more (by commit LSN) is stored within one atomic batch: one
// Nats-Batch-Id, consecutive batch sequences, at consecutive stream
// sequences (a batch may hold several whole transactions). A
// transaction of more than limit events (0: none) must instead carry
// contract.HeaderAtomicFallback on every event.
func requireWholeTransactions(t *testing.T, env *relaytest.Env, limit int) (batches, fallbacks int) {
	t.Helper()
	type tx struct {
		seqs     []uint64
		batch    map[string]bool
		fallback int
		order    []string
	}
	txs := map[string]*tx{}
	var lsns []string
	for _, m := range relaytest.StreamInOrder(t, env) {
		if strings.HasPrefix(m.Subject, env.DeadSubj) {
			continue
		}
		lsn := m.Header.Get(contract.HeaderCommitLSN)
		x := txs[lsn]
		if x == nil {
			x = &tx{batch: map[string]bool{}}
			txs[lsn] = x
			lsns = append(lsns, lsn)
		}
		x.seqs = append(x.seqs, m.Sequence)
		x.batch[m.Header.Get(headerBatchID)] = true
		x.order = append(x.order, m.Header.Get(headerBatchSeq))
		if m.Header.Get(contract.HeaderAtomicFallback) != "" {
			x.fallback++
		}
	}
	for _, lsn := range lsns {
		x := txs[lsn]
		n := len(x.seqs)
		switch {
		case limit > 0 && n > limit:
			if x.fallback != n {
				t.Errorf("transaction at %s: %d events, over the limit of %d, %d of them marked %s; want all", lsn, n, limit, x.fallback, contract.HeaderAtomicFallback)
			}
			fallbacks++
			continue
		case n == 1:
			continue
		case x.fallback > 0:
			t.Errorf("transaction at %s of %d events: %d marked %s", lsn, n, x.fallback, contract.HeaderAtomicFallback)
		case len(x.batch) != 1 || x.batch[""]:
			t.Errorf("transaction at %s of %d events stored in %d batches %v: not whole", lsn, n, len(x.batch), x.batch)
		}
		for i := 1; i < n; i++ {
			if x.seqs[i] != x.seqs[i-1]+1 {
				t.Errorf("transaction at %s split in the stream: sequences %v", lsn, x.seqs)
				break
			}
		}
		for i := 1; i < n; i++ {
			// A batch may hold several whole transactions: numbered on.
			if x.order[i] != fmt.Sprint(atoi(x.order[i-1])+1) {
				t.Errorf("transaction at %s: batch sequence %v", lsn, x.order)
				break
			}
		}
		batches++
	}
	t.Logf("%d transactions, %d of two events or more stored within one atomic batch each, %d over the limit", len(lsns), batches, fallbacks)
	if batches == 0 {
		t.Error("no transaction stored as an atomic batch")
	}
	return batches, fallbacks
}

// TestAtomicFallback: a transaction of more events than an atomic batch
// holds (1,000) goes out as ordinary messages, each marked
// Outbox-Atomic-Fallback, and the relay says so; the transactions around
// it are atomic.
func TestAtomicFallback(t *testing.T) {
	env := suite.NewEnv(t)
	relay := suite.StartRelay(t, env, "--atomic-transactions")
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	env.Tx(relaytest.NewRow("order", "a", "created", `{}`), relaytest.NewRow("order", "a", "paid", `{}`))
	env.Backlog(1500)
	env.Tx(relaytest.NewRow("order", "b", "created", `{}`), relaytest.NewRow("order", "b", "paid", `{}`), relaytest.NewRow("order", "b", "sent", `{}`))
	env.WaitRows(time.Minute)
	relaytest.RequireLog(t, relay, "transaction not published atomically", 1)
	relaytest.StopRelay(t, relay)
	env.CheckWith(relaytest.Expect{})
	if batches, fallbacks := requireWholeTransactions(t, env, 1000); batches != 2 || fallbacks != 1 {
		t.Errorf("%d atomic batches and %d transactions over the limit, want 2 and 1", batches, fallbacks)
	}
}

// TestAtomicRefused: with --atomic-transactions the relay refuses to start
// on a stream that does not allow atomic publishing, and says what to do;
// a stream it creates allows it.
func TestAtomicRefused(t *testing.T) {
	env := suite.NewEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := env.JS.CreateStream(ctx, jetstream.StreamConfig{Name: env.Stream, Subjects: []string{"outbox.*.*", env.DeadSubj},
		Storage: jetstream.FileStorage, Duplicates: env.DuplicateWindow}); err != nil {
		t.Fatal(err)
	}
	relay := suite.StartRelay(t, env, "--atomic-transactions")
	if code := relay.Wait(relaytest.FaultWait); code == 0 {
		t.Fatalf("relay exited 0 on a stream without allow_atomic; log:\n%s", relay.Logs())
	}
	for _, want := range []string{"allow_atomic", "--atomic-transactions"} {
		if !strings.Contains(relay.Logs(), want) {
			t.Errorf("the refusal does not name %q; log:\n%s", want, relay.Logs())
		}
	}

	created := suite.NewEnv(t)
	relay = suite.StartRelay(t, created, "--atomic-transactions")
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	info, err := created.StreamHandle(10 * time.Second).Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Config.AllowAtomicPublish {
		t.Error("the stream the relay created does not allow atomic publishing")
	}
	relaytest.StopRelay(t, relay)
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
