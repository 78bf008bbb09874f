package relaytest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/decode"
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

// TryTx is Tx returning the error: for writes that may meet a server
// going away.
func (e *Env) TryTx(rows ...Row) ([]string, error) {
	return e.insert(context.Background(), rows, true)
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
	// Rate, when above 0, is the most events a second all writers commit
	// together (see pacer), rolled-back ones not counted; the writers
	// need to be enough to reach it.
	Rate float64

	pace        *pacer
	mu          sync.Mutex
	started     time.Time // of the first Run
	ended       time.Time // of the last Run, zero while one runs
	committed   []string
	committedTx int
	aborted     []string
	unknown     []string
}

// CommittedTx returns how many transactions committed so far.
func (w *Workload) CommittedTx() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.committedTx
}

// WaitTx waits until n more transactions than now have committed, or
// fails the test after timeout: the load is running, whatever the machine's
// speed.
func (w *Workload) WaitTx(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	want := w.CommittedTx() + n
	deadline := time.Now().Add(timeout)
	for w.CommittedTx() < want {
		if time.Now().After(deadline) {
			t.Fatalf("the workload committed %d transactions in %s, want %d more", w.CommittedTx()-want+n, timeout, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
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
	if w.Rate > 0 && w.pace == nil {
		w.pace = newPacer(w.Rate)
	}
	w.mu.Lock()
	if w.started.IsZero() {
		w.started = time.Now()
	}
	w.ended = time.Time{}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.ended = time.Now()
		w.mu.Unlock()
	}()
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
		if w.pace != nil && commit { // Rate counts committed events; rollbacks come on top
			w.pace.wait(ctx, size)
			if ctx.Err() != nil {
				return nil
			}
		}
		ids, err := w.tx(ctx, e, writer, aggs, commit)
		w.mu.Lock()
		switch {
		case err == nil && commit:
			w.committed = append(w.committed, ids...)
			w.committedTx++
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

// tx writes one event per aggregate in aggs in one transaction. Each event
// takes its aggregate's next sequence number and carries it in its payload,
// in one statement; the statements go in one batch, one round trip, so
// that a few writers reach thousands of events a second.
func (w *Workload) tx(ctx context.Context, e *Env, writer int, aggs []string, commit bool) ([]string, error) {
	tx, err := e.Pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	b := &pgx.Batch{}
	for _, agg := range aggs {
		b.Queue(`WITH s AS (INSERT INTO test_agg_seq VALUES ($1, 1)
				ON CONFLICT (agg) DO UPDATE SET n = test_agg_seq.n + 1 RETURNING n)
			INSERT INTO `+e.Table.Quoted()+` (aggregate_type, aggregate_id, event_type, payload)
			SELECT 'test', $1, 'happened', jsonb_build_object('agg', $1::text, 'seq', s.n, 'writer', $2::int) FROM s
			RETURNING id::text`, agg, writer)
	}
	br := tx.SendBatch(ctx, b)
	ids := make([]string, 0, len(aggs))
	for range aggs {
		var id string
		if err := br.QueryRow().Scan(&id); err != nil {
			br.Close()
			return ids, err
		}
		ids = append(ids, id)
	}
	if err := br.Close(); err != nil {
		return ids, err
	}
	if !commit {
		return ids, tx.Rollback(ctx)
	}
	return ids, tx.Commit(ctx)
}

// Backlog commits n events in one transaction, written in one statement,
// and returns their ids: work the relay is still publishing, with events
// in flight, for a moment after it commits (see Relay.WaitInFlight).
func (e *Env) Backlog(n int) []string {
	e.T.Helper()
	rows, err := e.Pool.Query(context.Background(), `INSERT INTO `+e.Table.Quoted()+` (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'backlog', 'b' || (i % 20), 'queued', jsonb_build_object('n', i) FROM generate_series(1, $1) AS i
		RETURNING id::text`, n)
	if err != nil {
		e.T.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		e.T.Fatalf("write a backlog of %d events: %v", n, err)
	}
	return ids
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
// missing, extra, duplicated, reordered or unreadable message (see
// CheckWith).
func (e *Env) Check() verify.Report {
	e.T.Helper()
	return e.CheckWith(Expect{}).Report
}

// Expect is what CheckWith requires beyond an exact match of the table
// and the stream.
type Expect struct {
	// Workload, when set, is compared with the stream both ways: every
	// event it committed is stored, no event it rolled back is.
	Workload *Workload
	// MinTx fails the check when the Workload committed fewer
	// transactions: a fault under a load that did not run proves nothing.
	MinTx int
	// Reordered tolerates, wholesale, events stored after events that
	// committed later: a stream with no room that refuses one message and
	// stores the next, smaller one (e2e/room). They are still counted in
	// the Result. A stream leader change is bounded instead: LeaderChanges.
	Reordered bool
	// Republished are ids published again by hand after the stream lost
	// them (verify --republish, dlq retry): they land after later events.
	Republished []string
	// Polled says a polling relay (run --source poll) published the
	// events: they carry no commit position (commit LSN 0/0), so there is
	// no commit order across the stream to check, but the order of each
	// aggregate is still checked, by the Workload's sequence numbers.
	Polled bool
	// LeaderChanges are stream leaders killed during the test: events
	// stored out of commit order are tolerated (and counted in Tolerated)
	// only among those that may have been in flight at one of them; any
	// other inversion fails the check (see LeaderChange).
	LeaderChanges []LeaderChange
	// StoredDuplicates, when above 0, tolerates up to that many events
	// stored more than once (the polling relay's documented case: a
	// republish after the duplicate window); they are still counted, and
	// more fail the check.
	StoredDuplicates int
}

// Result is the outcome of CheckWith.
type Result struct {
	verify.Report
	// Committed and Aborted count the Workload's events, CommittedTx its
	// committed transactions.
	Committed, Aborted, CommittedTx int
	// Inversions are events stored after an event that committed later,
	// in the whole stream (commit LSN, then index in the transaction).
	Inversions []string
	// SeqInversions are workload events stored after a later event of
	// their aggregate, by the sequence numbers in their payloads.
	SeqInversions []string
	// Tolerated are the inversions of any kind above that Expect's
	// LeaderChanges allowed, taken out of those lists.
	Tolerated []string
	// invPairs and seqPairs name the two events of each inversion, in the
	// order of Inversions and SeqInversions.
	invPairs, seqPairs []orderPair
}

// String sums the result up for a test log.
func (r Result) String() string {
	load := ""
	if r.CommittedTx > 0 {
		load = fmt.Sprintf(", workload: %d committed in %d transactions, %d rolled back", r.Committed, r.CommittedTx, r.Aborted)
	}
	tolerated := ""
	if len(r.Tolerated) > 0 {
		tolerated = fmt.Sprintf(", %d more tolerated at stream leader changes", len(r.Tolerated))
	}
	return fmt.Sprintf("%d events checked (%d messages, %d dead letters)%s; "+
		"missing %d, extra %d, duplicated %d, out of order %d (commit order %d, per aggregate %d/%d%s), unparsed %d",
		r.Rows, r.Messages, r.DeadLetters, load,
		len(r.Missing), len(r.Extra), len(r.Duplicates), r.OutOfOrder(), len(r.Inversions), len(r.OrderViolations), len(r.SeqInversions), tolerated, len(r.Unparsed))
}

// OutOfOrder counts the events stored out of order by any of the checks.
func (r Result) OutOfOrder() int {
	return max(len(r.Inversions), len(r.OrderViolations), len(r.SeqInversions))
}

// checkBudget is the time CheckWith may take: two minutes, and one more
// per 100,000 rows, as it reads the whole stream twice (a long nemesis run
// leaves over half a million messages).
func (e *Env) checkBudget() time.Duration {
	var rows int64
	if err := e.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+e.Table.Quoted()).Scan(&rows); err != nil {
		e.T.Fatalf("count the outbox rows: %v", err)
	}
	return 2*time.Minute + time.Duration(rows/100_000)*time.Minute
}

// CheckWith compares the table with the stream, and fails the test on any
// missing, extra (rolled back), duplicated or unreadable message, and on
// any event stored out of commit order: per aggregate (verify's check,
// and the sequence numbers the Workload writes into payloads) and across
// the whole stream, where commit positions (Outbox-Commit-Lsn, then
// Outbox-Txn-Index) never decrease from one message to the next. The
// documented exceptions have no place in that order: events published
// from the table at the slot's creation (commit LSN 0/0) and dead letters.
// Only the first copy of an event counts for order; repeats count as
// duplicates.
func (e *Env) CheckWith(x Expect) Result {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e.checkBudget())
	defer cancel()
	stream := e.StreamHandle(10 * time.Second)
	subjects := []string{e.subjectFilter(), e.DeadSubj}
	var res Result
	var err error
	for attempt := 0; ; attempt++ {
		// JetStream may still be electing leaders after a fault.
		if res.Report, err = verify.Run(ctx, e.Pool, jssink.NewReader(e.JS, stream, subjects[0], subjects[1], nil), verify.Options{Table: e.Table}); err == nil || attempt == 10 {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		e.T.Fatalf("verify: %v", err)
	}
	var stored map[string]int
	var order storedOrder
	for attempt := 0; ; attempt++ {
		// The same: an ordered consumer needs the meta leader.
		res.Inversions, res.SeqInversions, res.invPairs, res.seqPairs = nil, nil, nil, nil
		if stored, order, err = e.checkOrder(ctx, stream, subjects, x, &res); err == nil || attempt == 10 {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		e.T.Fatalf("read the stream: %v", err)
	}
	if len(x.LeaderChanges) > 0 {
		res.tolerate(x.LeaderChanges, order)
	}
	rep := res.Report
	if x.Reordered {
		rep.OrderViolations = nil // counted, tolerated
	}
	if n := len(rep.Duplicates); n > 0 && n <= x.StoredDuplicates {
		e.T.Logf("%d events stored more than once, up to %d tolerated: %v", n, x.StoredDuplicates, rep.Duplicates)
		rep.Duplicates = nil // counted, tolerated
	}
	if !rep.OK() {
		e.T.Errorf("table vs stream: %d rows, %d messages; missing %d %v; extra %d %v; duplicates %d %v; order violations %d %v; unparsed %d %v",
			rep.Rows, rep.Messages, len(rep.Missing), head(rep.Missing), len(rep.Extra), head(rep.Extra),
			len(rep.Duplicates), headOfMap(rep.Duplicates), len(rep.OrderViolations), head(rep.OrderViolations), len(rep.Unparsed), head(rep.Unparsed))
	}
	if !x.Reordered && len(res.Inversions) > 0 {
		e.T.Errorf("commit order broken across the stream, %d times: %s", len(res.Inversions), strings.Join(head(res.Inversions), "; "))
	}
	if !x.Reordered && len(res.SeqInversions) > 0 {
		e.T.Errorf("per-aggregate commit order broken, %d times: %s", len(res.SeqInversions), strings.Join(head(res.SeqInversions), "; "))
	}
	if w := x.Workload; w != nil {
		committed, aborted := w.Committed(), w.Aborted()
		res.Committed, res.Aborted, res.CommittedTx = len(committed), len(aborted), w.CommittedTx()
		var lost, phantom []string
		for _, id := range committed {
			if stored[id] == 0 {
				lost = append(lost, id)
			}
		}
		for _, id := range aborted {
			if stored[id] > 0 {
				phantom = append(phantom, id)
			}
		}
		if len(lost) > 0 {
			e.T.Errorf("%d of the %d events the workload committed are not in the stream: %v", len(lost), len(committed), head(lost))
		}
		if len(phantom) > 0 {
			e.T.Errorf("%d of the %d events the workload rolled back are in the stream: %v", len(phantom), len(aborted), head(phantom))
		}
		if res.CommittedTx < x.MinTx {
			e.T.Errorf("the workload committed %d transactions, want at least %d: the load did not run", res.CommittedTx, x.MinTx)
		}
	}
	return res
}

func (e *Env) subjectFilter() string {
	dots, err := sink.ParseDots(e.SubjectDots)
	if err != nil {
		e.T.Fatal(err)
	}
	t, err := sink.ParseTemplate(e.Subject, sink.WithDots(dots))
	if err != nil {
		e.T.Fatal(err)
	}
	return t.Filter()
}

// checkOrder reads the stream once, in order, fills res's Inversions and
// SeqInversions, and returns how many copies of each event id it holds and
// where the first copy of each event in commit order is.
func (e *Env) checkOrder(ctx context.Context, stream jetstream.Stream, subjects []string, x Expect, res *Result) (map[string]int, storedOrder, error) {
	republished := map[string]bool{}
	for _, id := range x.Republished {
		republished[id] = true
	}
	stored := map[string]int{}
	order := storedOrder{}
	var top decode.Position
	var topID string
	lastSeq := map[string]int64{}
	lastID := map[string]string{}
	err := jssink.Messages(ctx, stream, subjects, func(m *jetstream.RawStreamMsg) {
		ev, ok := jssink.ParseStored(m)
		if !ok {
			return // verify reports it as unparsed
		}
		stored[ev.ID]++
		if stored[ev.ID] > 1 || ev.DeadLetter || (ev.Position.CommitLSN == 0 && !x.Polled) || republished[ev.ID] {
			return // a repeat, or outside commit order
		}
		order[ev.ID] = storedAt{pos: ev.Position, seq: m.Sequence}
		switch {
		case x.Polled:
			// No commit order across aggregates: only the payloads' order.
		case ev.Position.Less(top):
			res.Inversions = append(res.Inversions, fmt.Sprintf("event %s (%s #%d) stored at seq %d after %s (%s #%d, seq %d)",
				ev.ID, ev.Position.CommitLSN, ev.Position.Index, m.Sequence, topID, top.CommitLSN, top.Index, order[topID].seq))
			res.invPairs = append(res.invPairs, orderPair{late: ev.ID, after: topID})
		default:
			top, topID = ev.Position, ev.ID
		}
		var p struct {
			Agg string `json:"agg"`
			Seq int64  `json:"seq"`
		}
		if json.Unmarshal(m.Data, &p) != nil || p.Agg == "" {
			return // not a workload event
		}
		if p.Seq <= lastSeq[p.Agg] {
			res.SeqInversions = append(res.SeqInversions, fmt.Sprintf("%s seq %d (event %s, stream seq %d) stored after seq %d (event %s)",
				p.Agg, p.Seq, ev.ID, m.Sequence, lastSeq[p.Agg], lastID[p.Agg]))
			res.seqPairs = append(res.seqPairs, orderPair{late: ev.ID, after: lastID[p.Agg]})
			return
		}
		lastSeq[p.Agg], lastID[p.Agg] = p.Seq, ev.ID
	})
	return stored, order, err
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

// headOfMap lists up to 10 of m's entries, in key order.
func headOfMap(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range head(keys) {
		out = append(out, fmt.Sprintf("%s×%d", k, m[k]))
	}
	return out
}

func head[T any](s []T) []T {
	if len(s) > 10 {
		return s[:10]
	}
	return s
}
