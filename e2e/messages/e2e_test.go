package messages

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// TestEndToEnd: rows already in the table at the first start, one-row
// transactions, a 1,000-row transaction and concurrent writers all arrive
// once each, in commit order, with the right subject, headers and body;
// rolled-back work never arrives; SIGTERM drains and exits 0.
func TestEndToEnd(t *testing.T) {
	env := suite.NewEnv(t)
	ctx := context.Background()
	before := env.Tx(relaytest.NewRow("order", "1", "order.created", `{"n": 1}`), relaytest.NewRow("order", "1", "order.paid", `{"n": 2}`))

	relay := suite.StartRelay(t, env)
	relay.WaitLog("streaming from the slot", 30*time.Second)

	single := env.Tx(relaytest.NewRow("order", "42", "order.created", `{"total": 10.5, "items": ["a", "b"]}`))[0]
	big := make([]relaytest.Row, 1000)
	for i := range big {
		big[i] = relaytest.NewRow("invoice", "7", "line.added", `{"line": `+strconv.Itoa(i)+`}`)
	}
	bigIDs := env.Tx(big...)

	// Rolled back explicitly, and aborted by an error mid-transaction.
	tx, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var rolledBack, aborted string
	if err := tx.QueryRow(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('x','1','rolled.back','{}') RETURNING id::text`).Scan(&rolledBack); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err = env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('x','1','aborted','{}') RETURNING id::text`).Scan(&aborted); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1/0`); err == nil {
		t.Fatal("division by zero succeeded")
	}
	_ = tx.Rollback(ctx)

	w := &relaytest.Workload{Writers: 4, MaxTxRows: 5, Aggregates: 20, RollbackEvery: 4}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := w.Run(wctx, env, 600); err != nil {
		t.Fatal(err)
	}
	env.WaitRows(time.Minute)
	env.WaitSlotCaughtUp(time.Minute)
	rep := env.CheckWith(relaytest.Expect{Workload: w, MinTx: 100})
	if want := len(before) + 1 + len(bigIDs) + len(w.Committed()); rep.Rows != want || rep.Messages != want {
		t.Errorf("rows %d, messages %d, want %d of each", rep.Rows, rep.Messages, want)
	}
	stored := relaytest.StoredByID(t, env)
	for _, id := range append(w.Aborted(), rolledBack, aborted) {
		if _, ok := stored[id]; ok {
			t.Errorf("rolled-back event %s was published", id)
		}
	}
	// The 1,000 rows of one transaction arrive contiguous and in order.
	for i := 1; i < len(bigIDs); i++ {
		if stored[bigIDs[i]].Sequence != stored[bigIDs[i-1]].Sequence+1 {
			t.Fatalf("row %d of the big transaction is not right after row %d", i, i-1)
		}
	}
	// The rows present at the first start come first.
	if stored[before[0]].Sequence != 1 || stored[before[1]].Sequence != 2 {
		t.Errorf("pre-existing rows at seq %d, %d; want 1, 2", stored[before[0]].Sequence, stored[before[1]].Sequence)
	}

	m := stored[single]
	if m.Subject != "outbox.order.order%2Ecreated" {
		t.Errorf("subject = %q", m.Subject)
	}
	var payload, created string
	if err := env.Pool.QueryRow(ctx, `SELECT payload::text, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') FROM outbox_events WHERE id = $1`, single).Scan(&payload, &created); err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != payload {
		t.Errorf("body = %q, want the row's payload %q", m.Data, payload)
	}
	want := map[string]string{
		contract.HeaderMsgID: single, contract.HeaderAggregateType: "order", contract.HeaderAggregateID: "42",
		contract.HeaderEventType: "order.created", contract.HeaderTxnIndex: "0",
	}
	for k, v := range want {
		if got := m.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if got := m.Header.Get(contract.HeaderCreatedAt); !strings.HasPrefix(got, strings.TrimRight(strings.TrimSuffix(created, "Z"), "0")) || !strings.HasSuffix(got, "Z") {
		t.Errorf("Outbox-Created-At = %q, want %s in RFC 3339 UTC", got, created)
	}
	if lsn := m.Header.Get(contract.HeaderCommitLSN); !strings.Contains(lsn, "/") {
		t.Errorf("Outbox-Commit-Lsn = %q", lsn)
	}

	relay.Term()
	if code := relay.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d, want 0", code)
	}
	if !strings.Contains(relay.Logs(), "drained; confirmed the final position") {
		t.Error("no final status update logged")
	}
	slot := env.SlotInfo()
	if slot.Active {
		t.Error("slot still active after the relay exited")
	}
	if slot.LagBytes > 1<<20 {
		t.Errorf("slot lag after a clean stop = %d bytes", slot.LagBytes)
	}
}

type rawMsg = jetstream.RawStreamMsg

// TestCheckCatchesDamage: the check every fault case ends with fails on
// each kind of damage, put into a healthy stream by hand: a load that did
// not run, an event stored twice, an event that is no committed row and
// lands out of commit order, a message without the relay's headers, a
// rolled-back event, a committed event gone.
func TestCheckCatchesDamage(t *testing.T) {
	env := suite.NewEnv(t)
	relay := suite.StartRelay(t, env)
	relay.WaitLog("streaming from the slot", 30*time.Second)
	w := &relaytest.Workload{Writers: 2, MaxTxRows: 3, Aggregates: 5, RollbackEvery: 3}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.Run(ctx, env, 60); err != nil {
		t.Fatal(err)
	}
	env.WaitRows(time.Minute)
	env.WaitSlotCaughtUp(time.Minute)
	relay.Drain(30 * time.Second)
	if len(w.Aborted()) == 0 {
		t.Fatal("the workload rolled nothing back")
	}
	rec := &recordingTB{TB: t}
	probe := *env
	probe.T = rec
	expect := relaytest.Expect{Workload: w, MinTx: 10}
	if probe.CheckWith(expect); len(rec.errs) > 0 {
		t.Fatalf("the check fails on a healthy stream: %v", rec.errs)
	}
	stored := relaytest.StoredByID(t, env)
	committed := w.Committed()
	oldest := stored[committed[0]]
	newest := relaytest.LastOnSubjects(t, env, "outbox.>")
	publish := func(id string, from *rawMsg, header map[string]string) {
		t.Helper()
		m := nats.NewMsg(from.Subject)
		for k, v := range from.Header {
			m.Header[k] = v
		}
		m.Header.Set(contract.HeaderMsgID, id)
		for k, v := range header {
			if v == "" {
				m.Header.Del(k)
			} else {
				m.Header.Set(k, v)
			}
		}
		m.Data = from.Data
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			ack, err := env.JS.PublishMsg(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			if !ack.Duplicate {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("JetStream keeps dropping %s as a duplicate", id)
			}
		}
	}
	damage := []struct {
		name   string
		do     func()
		expect relaytest.Expect
		want   string
	}{
		{"a load that did not run", func() {}, relaytest.Expect{Workload: w, MinTx: len(committed) + 1}, "the load did not run"},
		{"an event stored twice", func() { publish(committed[0], oldest, nil) }, expect, "duplicates 1"},
		{"an event that is no row, out of commit order", func() { publish(uuid(t), oldest, nil) }, expect, "commit order broken across the stream"},
		{"a message without the relay's headers", func() { publish(uuid(t), newest, map[string]string{contract.HeaderCommitLSN: ""}) }, expect, "unparsed 1"},
		{"a rolled-back event", func() { publish(w.Aborted()[0], newest, nil) }, expect, "the workload rolled back are in the stream"},
		{"a committed event gone", func() {
			if err := env.StreamHandle(time.Second).DeleteMsg(ctx, stored[committed[len(committed)-1]].Sequence); err != nil {
				t.Fatal(err)
			}
		}, expect, "the workload committed are not in the stream"},
	}
	for _, d := range damage {
		d.do()
		rec.errs = nil
		probe.CheckWith(d.expect)
		if !strings.Contains(strings.Join(rec.errs, "\n"), d.want) {
			t.Errorf("%s: the check does not say %q; it says %v", d.name, d.want, rec.errs)
		}
	}
}

// recordingTB keeps the errors reported to it instead of failing the test.
type recordingTB struct {
	testing.TB
	errs []string
}

func (r *recordingTB) Helper()           {}
func (r *recordingTB) Error(args ...any) { r.errs = append(r.errs, fmt.Sprint(args...)) }
func (r *recordingTB) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func uuid(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
