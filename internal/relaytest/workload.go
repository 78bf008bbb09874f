package relaytest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/sink"
	"github.com/outbox-relay/outbox-relay/verify"
)

// Row is one outbox row a test writes. A nil field is left to the
// column default.
type Row struct {
	AggregateType, AggregateID, EventType string
	Payload                               string
}

// NewRow returns a Row.
func NewRow(aggregateType, aggregateID, eventType, payload string) Row {
	return Row{AggregateType: aggregateType, AggregateID: aggregateID, EventType: eventType, Payload: payload}
}

// Tx inserts rows in one transaction and returns their ids in order.
func (e *Env) Tx(rows ...Row) []string {
	e.T.Helper()
	ids, err := e.insert(context.Background(), rows, true)
	if err != nil {
		e.T.Fatal(err)
	}
	return ids
}

// insert writes rows in one transaction, committing or rolling back.
func (e *Env) insert(ctx context.Context, rows []Row, commit bool) ([]string, error) {
	tx, err := e.Pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	ids := make([]string, 0, len(rows))
	for _, r := range rows {
		var id string
		err := tx.QueryRow(ctx, `INSERT INTO `+e.Table.Quoted()+` (aggregate_type, aggregate_id, event_type, payload)
			VALUES ($1, $2, $3, $4) RETURNING id::text`, r.AggregateType, r.AggregateID, r.EventType, r.Payload).Scan(&id)
		if err != nil {
			return nil, fmt.Errorf("insert outbox row: %w", err)
		}
		ids = append(ids, id)
	}
	if !commit {
		return ids, tx.Rollback(ctx)
	}
	return ids, tx.Commit(ctx)
}

// Workload writes events from concurrent writers. Every event's payload
// carries its aggregate's sequence number, taken from a counter row locked
// until commit, so commit order per aggregate is known independently of
// the relay.
type Workload struct {
	Writers    int
	MaxTxRows  int // transactions have 1..MaxTxRows rows
	Aggregates int
	// RollbackEvery makes every n-th transaction of a writer roll back.
	RollbackEvery int
	// Pace is the pause between a writer's transactions.
	Pace time.Duration

	mu        sync.Mutex
	committed []string
	aborted   []string
	unknown   []string
}

// Committed returns the ids of committed events so far.
func (w *Workload) Committed() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.committed...)
}

// Aborted returns the ids of rolled-back events.
func (w *Workload) Aborted() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.aborted...)
}

// Run writes until ctx ends or total events were committed (0: no limit).
// A failed commit (for example Postgres restarting) leaves its outcome
// unknown; the final check reads the table, which knows.
func (w *Workload) Run(ctx context.Context, e *Env, total int) error {
	if _, err := e.Pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS test_agg_seq (agg TEXT PRIMARY KEY, n BIGINT NOT NULL)`); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, w.Writers)
	for i := 0; i < max(w.Writers, 1); i++ {
		wg.Add(1)
		go func(writer int) {
			defer wg.Done()
			if err := w.writer(ctx, e, writer, total); err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func (w *Workload) writer(ctx context.Context, e *Env, writer, total int) error {
	rng := rand.New(rand.NewSource(int64(writer) + time.Now().UnixNano()))
	for n := 1; ctx.Err() == nil; n++ {
		if total > 0 && len(w.Committed()) >= total {
			return nil
		}
		size := 1 + rng.Intn(max(w.MaxTxRows, 1))
		aggs := make([]string, size)
		for i := range aggs {
			aggs[i] = fmt.Sprintf("a%d", rng.Intn(max(w.Aggregates, 1)))
		}
		sort.Strings(aggs) // lock counters in one order: no deadlocks
		commit := w.RollbackEvery == 0 || n%w.RollbackEvery != 0
		ids, err := w.tx(ctx, e, writer, aggs, commit)
		w.mu.Lock()
		switch {
		case err == nil && commit:
			w.committed = append(w.committed, ids...)
		case err == nil:
			w.aborted = append(w.aborted, ids...)
		default:
			w.unknown = append(w.unknown, ids...)
		}
		w.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			// The server may be restarting under a fault test: keep going.
			time.Sleep(100 * time.Millisecond)
		}
		if w.Pace > 0 {
			time.Sleep(w.Pace)
		}
	}
	return nil
}

func (w *Workload) tx(ctx context.Context, e *Env, writer int, aggs []string, commit bool) ([]string, error) {
	tx, err := e.Pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var ids []string
	for _, agg := range aggs {
		var seq int64
		if err := tx.QueryRow(ctx, `INSERT INTO test_agg_seq VALUES ($1, 1)
			ON CONFLICT (agg) DO UPDATE SET n = test_agg_seq.n + 1 RETURNING n`, agg).Scan(&seq); err != nil {
			return ids, err
		}
		payload := fmt.Sprintf(`{"agg": %q, "seq": %d, "writer": %d}`, agg, seq, writer)
		var id string
		if err := tx.QueryRow(ctx, `INSERT INTO `+e.Table.Quoted()+` (aggregate_type, aggregate_id, event_type, payload)
			VALUES ('test', $1, 'happened', $2) RETURNING id::text`, agg, payload).Scan(&id); err != nil {
			return ids, err
		}
		ids = append(ids, id)
	}
	if !commit {
		return ids, tx.Rollback(ctx)
	}
	return ids, tx.Commit(ctx)
}

// CountStored returns how many relay messages the stream holds.
func (e *Env) CountStored() uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := e.JS.Stream(ctx, e.Stream)
	if err != nil {
		return 0
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

// WaitStored waits until the stream holds at least n messages.
func (e *Env) WaitStored(n int, timeout time.Duration) {
	e.T.Helper()
	deadline := time.Now().Add(timeout)
	for e.CountStored() < uint64(n) {
		if time.Now().After(deadline) {
			e.T.Fatalf("stream holds %d messages after %s, want %d", e.CountStored(), timeout, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitRows waits until every committed row of the table is in the stream.
func (e *Env) WaitRows(timeout time.Duration) {
	e.T.Helper()
	var rows int
	if err := e.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+e.Table.Quoted()).Scan(&rows); err != nil {
		e.T.Fatal(err)
	}
	e.WaitStored(rows, timeout)
}

// Check compares the table with the stream and fails the test on any
// missing, extra, duplicated or reordered event. It also checks, from the
// payloads the Workload wrote, that each aggregate's events are stored in
// commit order.
func (e *Env) Check() verify.Report {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stream := e.StreamHandle(10 * time.Second)
	subjects := []string{e.subjectFilter(), e.DeadSubj}
	var rep verify.Report
	var err error
	for attempt := 0; ; attempt++ {
		// JetStream may still be electing leaders after a fault.
		if rep, err = verify.Run(ctx, e.Pool, stream, verify.Options{Table: e.Table, Subjects: subjects}); err == nil || attempt == 10 {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		e.T.Fatalf("verify: %v", err)
	}
	if !rep.OK() {
		e.T.Errorf("table vs stream: %d rows, %d messages; missing %d %v; extra %d %v; duplicates %d %v; order violations %d %v; unparsed %d %v",
			rep.Rows, rep.Messages, len(rep.Missing), head(rep.Missing), len(rep.Extra), head(rep.Extra),
			len(rep.Duplicates), rep.Duplicates, len(rep.OrderViolations), rep.OrderViolations, len(rep.Unparsed), rep.Unparsed)
	}
	if err := e.checkAggregateSeq(ctx, stream, subjects); err != nil {
		e.T.Error(err)
	}
	return rep
}

func (e *Env) subjectFilter() string {
	t, err := sink.ParseTemplate(e.Subject)
	if err != nil {
		e.T.Fatal(err)
	}
	return t.Filter()
}

func (e *Env) checkAggregateSeq(ctx context.Context, stream jetstream.Stream, subjects []string) error {
	last := map[string]int64{}
	seen := map[string]bool{}
	var problems []string
	err := verify.Messages(ctx, stream, subjects, func(m *jetstream.RawStreamMsg) {
		id := m.Header.Get(sink.HeaderMsgID)
		if seen[id] || m.Header.Get(sink.HeaderCommitLSN) == "0/0" {
			return // a repeat, or published from the table (not in WAL order)
		}
		seen[id] = true
		var p struct {
			Agg string `json:"agg"`
			Seq int64  `json:"seq"`
		}
		if json.Unmarshal(m.Data, &p) != nil || p.Agg == "" {
			return // not a workload event
		}
		if p.Seq <= last[p.Agg] {
			problems = append(problems, fmt.Sprintf("%s seq %d stored after seq %d", p.Agg, p.Seq, last[p.Agg]))
		}
		last[p.Agg] = max(last[p.Agg], p.Seq)
	})
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return errors.New("per-aggregate commit order broken: " + strings.Join(head(problems), "; "))
	}
	return nil
}

// TableIDs returns the ids of all rows in the outbox table.
func (e *Env) TableIDs() map[string]bool {
	rows, err := e.Pool.Query(context.Background(), `SELECT id::text FROM `+e.Table.Quoted())
	if err != nil {
		e.T.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		e.T.Fatal(err)
	}
	out := map[string]bool{}
	for _, id := range ids {
		out[id] = true
	}
	return out
}

func head[T any](s []T) []T {
	if len(s) > 10 {
		return s[:10]
	}
	return s
}
