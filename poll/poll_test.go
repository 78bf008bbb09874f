package poll

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// storedMsgs returns the stream's messages in order.
func storedMsgs(t *testing.T, env *relaytest.Env) []*jetstream.RawStreamMsg {
	t.Helper()
	var out []*jetstream.RawStreamMsg
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := jssink.Messages(ctx, env.StreamHandle(10*time.Second), []string{">"}, func(m *jetstream.RawStreamMsg) { out = append(out, m) })
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPollPublishesAndMarksProcessed: rows already in the table and rows
// written while the relay runs reach the stream with the WAL relay's
// subjects and headers (source headers naming the polling relay), each
// row's processed_at is set, and the check finds nothing missing, twice or
// out of aggregate order.
func TestPollPublishesAndMarksProcessed(t *testing.T) {
	env := pollEnv(t)
	before := env.Tx(relaytest.NewRow("order", "1", "created", `{"agg": "o1", "seq": 1}`),
		relaytest.NewRow("order", "1", "paid", `{"agg": "o1", "seq": 2}`),
		relaytest.NewRow("order", "2", "created", `{"agg": "o2", "seq": 1}`))
	r := start(t, env, config(t, env))
	waitFor(t, "rows present at start published", 30*time.Second, func() bool { return pending(t, env) == 0 })
	after := env.Tx(relaytest.NewRow("order", "1", "shipped", `{"agg": "o1", "seq": 3}`),
		relaytest.NewRow("order.v2", "a b", "created", `{"agg": "o3", "seq": 1}`))
	waitFor(t, "rows written later published", 30*time.Second, func() bool { return pending(t, env) == 0 })
	env.WaitRows(10 * time.Second)

	msgs := storedMsgs(t, env)
	if len(msgs) != 5 {
		t.Fatalf("stream holds %d messages, want 5", len(msgs))
	}
	byID := map[string]*jetstream.RawStreamMsg{}
	for _, m := range msgs {
		byID[m.Header.Get("Nats-Msg-Id")] = m
	}
	first := byID[before[0]]
	if first == nil || first.Subject != "outbox.order.created" || first.Header.Get(contract.HeaderAggregateID) != "1" ||
		first.Header.Get(contract.HeaderEventType) != "created" || first.Header.Get(contract.HeaderCreatedAt) == "" {
		t.Errorf("first event stored as %+v", first)
	}
	if m := byID[after[1]]; m == nil || m.Subject != "outbox.order%2Ev2.created" {
		t.Errorf("event with unsafe subject tokens stored as %+v", m)
	}
	if got := first.Header.Get(contract.HeaderSourceSlot); got != "poll:public.outbox_events" {
		t.Errorf("Outbox-Source-Slot = %q, want poll:public.outbox_events", got)
	}
	if first.Header.Get(contract.HeaderSourceSystem) == "" {
		t.Error("no Outbox-Source-System header")
	}
	var unprocessed, tried int
	if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE processed_at IS NULL), count(*) FILTER (WHERE attempts > 0)
		FROM outbox_events`).Scan(&unprocessed, &tried); err != nil {
		t.Fatal(err)
	}
	if unprocessed != 0 || tried != 0 {
		t.Errorf("%d rows without processed_at, %d with attempts: want 0 and 0", unprocessed, tried)
	}
	if n := r.metric(t, "outbox_relay_events_published_total"); n != 5 {
		t.Errorf("outbox_relay_events_published_total = %v, want 5", n)
	}
	// The article's names mean the same in poll mode.
	if n := r.metric(t, "outbox_events_published_total"); n != 5 {
		t.Errorf("outbox_events_published_total = %v, want 5", n)
	}
	if n := r.metric(t, "outbox_batch_duration_seconds"); n < 2 {
		t.Errorf("outbox_batch_duration_seconds observed %v batches, want at least 2", n)
	}
	if n := r.metric(t, "outbox_events_pending"); n != 0 {
		t.Errorf("outbox_events_pending = %v, want 0", n)
	}
	res := env.CheckWith(relaytest.Expect{Polled: true})
	if res.Rows != 5 || len(res.SeqInversions) != 0 {
		t.Errorf("check: %s", res)
	}
}

// TestPollTwoInstancesKeepAggregateOrder: two polling relays with small
// batches share a table that concurrent writers fill with transactions
// over a few aggregates. Each aggregate's events are stored in the order
// they were written, none twice, and both instances did work.
func TestPollTwoInstancesKeepAggregateOrder(t *testing.T) {
	env := pollEnv(t)
	cfg := config(t, env)
	cfg.Batch, cfg.Interval = 5, 10*time.Millisecond
	a, b := start(t, env, cfg), start(t, env, cfg)
	w := &relaytest.Workload{Writers: 4, MaxTxRows: 6, Aggregates: 8, RollbackEvery: 7}
	if err := w.Run(context.Background(), env, 1500); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every row published", 2*time.Minute, func() bool { return pending(t, env) == 0 })
	env.WaitRows(30 * time.Second)
	pa, pb := a.metric(t, "outbox_relay_events_published_total"), b.metric(t, "outbox_relay_events_published_total")
	t.Logf("instance a published %v events, b %v", pa, pb)
	if pa == 0 || pb == 0 {
		t.Errorf("one instance did nothing (a %v, b %v): the case does not test two at once", pa, pb)
	}
	for name, r := range map[string]*running{"a": a, "b": b} {
		if n := r.metric(t, "outbox_relay_duplicate_acks_total"); n != 0 {
			t.Errorf("instance %s: %v duplicate PubAcks: an event was published by both", name, n)
		}
	}
	res := env.CheckWith(relaytest.Expect{Workload: w, Polled: true, MinTx: 100})
	t.Logf("check: %s", res)
}

// TestPollRetryThenDeadLetter: a row larger than the stream's largest
// message is tried MaxAttempts times with a doubling wait (attempts,
// retry_after, last_error), then goes to the dead-letter subject and the
// dead-letter view; the next row of its aggregate waits for it, other
// aggregates do not.
func TestPollRetryThenDeadLetter(t *testing.T) {
	env := pollEnv(t)
	ctx := context.Background()
	if _, err := env.JS.CreateStream(ctx, jetstream.StreamConfig{Name: env.Stream, Subjects: []string{"outbox.>", env.DeadSubj},
		Storage: jetstream.FileStorage, MaxMsgSize: 2048, Duplicates: time.Second}); err != nil {
		t.Fatal(err)
	}
	big := fmt.Sprintf(`{"pad": %q}`, strings.Repeat("x", 4096))
	ids := env.Tx(relaytest.NewRow("order", "1", "created", big), relaytest.NewRow("order", "1", "paid", `{}`))
	other := env.Tx(relaytest.NewRow("order", "2", "created", `{}`))[0]
	cfg := config(t, env)
	cfg.MaxAttempts, cfg.Backoff, cfg.MaxBackoff, cfg.Interval = 3, 400*time.Millisecond, 10*time.Second, 50*time.Millisecond
	began := time.Now()
	r := start(t, env, cfg)

	type state struct {
		attempts  int
		lastError string
		waits     bool
		processed bool
	}
	read := func() state {
		var s state
		var le *string
		if err := env.Pool.QueryRow(ctx, `SELECT attempts, last_error, coalesce(retry_after > now(), false), processed_at IS NOT NULL
			FROM outbox_events WHERE id = $1`, ids[0]).Scan(&s.attempts, &le, &s.waits, &s.processed); err != nil {
			t.Fatal(err)
		}
		if le != nil {
			s.lastError = *le
		}
		return s
	}
	waitFor(t, "the other aggregate's event stored", 10*time.Second, func() bool { return env.CountStored() >= 1 })
	waitFor(t, "first rejection counted", 10*time.Second, func() bool { return read().attempts >= 1 })
	if s := read(); s.processed || !strings.Contains(s.lastError, "larger than") {
		t.Errorf("after the first rejection: %+v, want pending with last_error saying it is too large", s)
	}
	if env.CountStored() != 1 {
		t.Errorf("stream holds %d messages while the aggregate's first row waits, want 1 (the other aggregate's)", env.CountStored())
	}
	waitFor(t, "row dead-lettered and its aggregate's next row published", 30*time.Second, func() bool {
		return read().processed && pending(t, env) == 0
	})
	elapsed := time.Since(began)
	if min := cfg.Backoff + 2*cfg.Backoff; elapsed < min {
		t.Errorf("dead-lettered after %s, before the backoff of %s", elapsed, min)
	}
	s := read()
	if s.attempts != 3 || !s.processed || !strings.Contains(s.lastError, "gave up after 3 attempts") {
		t.Errorf("dead-lettered row: %+v, want 3 attempts, processed_at set, last_error saying it gave up", s)
	}
	var inView int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_dead_letters WHERE id = $1`, ids[0]).Scan(&inView); err != nil {
		t.Fatal(err)
	}
	if inView != 1 {
		t.Errorf("dead-letter view holds the row %d times, want 1", inView)
	}
	msgs := storedMsgs(t, env)
	var order []string
	for _, m := range msgs {
		id := strings.TrimPrefix(m.Header.Get("Nats-Msg-Id"), contract.DeadLetterMsgIDPrefix)
		order = append(order, id)
		if id == ids[0] && m.Subject != env.DeadSubj {
			t.Errorf("the rejected row stored on %s, want the dead-letter subject", m.Subject)
		}
	}
	if want := []string{other, ids[0], ids[1]}; fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("stream order %v, want %v (the other aggregate, the dead letter, then its aggregate's next row)", order, want)
	}
	if n := r.metric(t, "outbox_relay_poll_rejected_total"); n != 2 {
		t.Errorf("outbox_relay_poll_rejected_total = %v, want 2", n)
	}
	if n := r.metric(t, "outbox_relay_events_dead_lettered_total"); n != 1 {
		t.Errorf("outbox_relay_events_dead_lettered_total = %v, want 1", n)
	}
	env.CheckWith(relaytest.Expect{Polled: true})
}

// TestPollNotifyWakesAtOnce: with the trigger of migrate --notify, a row
// written while the relay sleeps is published long before the poll
// interval (20 s here) ends.
func TestPollNotifyWakesAtOnce(t *testing.T) {
	env := pollEnv(t)
	cfgConn, err := pgx.ParseConfig(env.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrations.InstallNotify(context.Background(), cfgConn, migrations.Names{Table: env.Table, Publication: env.Pub}); err != nil {
		t.Fatal(err)
	}
	cfg := config(t, env)
	cfg.Interval = 20 * time.Second
	r := start(t, env, cfg)
	// The listener signals once it listens: from then on nothing is missed.
	waitFor(t, "listening", 30*time.Second, func() bool { return r.metric(t, "outbox_relay_poll_wakeups_total") >= 1 })
	var lat []time.Duration
	for i := 1; i <= 5; i++ {
		began := time.Now()
		env.Tx(relaytest.NewRow("order", fmt.Sprint(i), "created", `{}`))
		waitFor(t, "event published", cfg.Interval/2, func() bool { return env.CountStored() >= uint64(i) })
		lat = append(lat, time.Since(began))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("insert to stored with NOTIFY, poll interval %s: median %s, max %s", cfg.Interval, lat[len(lat)/2], lat[len(lat)-1])
	if lat[len(lat)-1] > 5*time.Second {
		t.Errorf("slowest wake-up %s: NOTIFY did not wake the relay", lat[len(lat)-1])
	}
}

// TestPollCommitLostAfterPubAcks: every row of a batch is stored, then
// its commit fails (a deferred trigger refuses it: what a relay killed
// between the PubAcks and the commit leaves behind). Long after the
// stream's duplicate window the rows are still pending; the next batch
// finds the claim, reads the stream and publishes none of them again.
func TestPollCommitLostAfterPubAcks(t *testing.T) {
	env := pollEnv(t)
	env.Exec(`CREATE TABLE refuse_commit (on_ boolean NOT NULL)`)
	env.Exec(`INSERT INTO refuse_commit VALUES (true)`)
	env.Exec(`CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT on_ FROM refuse_commit) THEN RAISE EXCEPTION 'commit refused by the test'; END IF;
    RETURN NULL;
END $$`)
	env.Exec(`CREATE CONSTRAINT TRIGGER refuse AFTER UPDATE ON outbox_events DEFERRABLE INITIALLY DEFERRED
		FOR EACH ROW EXECUTE FUNCTION refuse()`)
	ids := env.Backlog(50)
	cfg := config(t, env)
	cfg.Interval = 50 * time.Millisecond
	r := start(t, env, cfg)
	env.WaitStored(len(ids), 30*time.Second)
	waitFor(t, "a commit refused", 30*time.Second, func() bool { return r.metric(t, "outbox_relay_poll_errors_total") >= 1 })
	// The fault's duration: past the duplicate window, a copy is stored.
	time.Sleep(2 * env.DuplicateWindow)
	if n := pending(t, env); n != len(ids) {
		t.Fatalf("%d rows pending while commits are refused, want %d", n, len(ids))
	}
	env.Exec(`UPDATE refuse_commit SET on_ = false`)
	waitFor(t, "rows processed", 30*time.Second, func() bool { return pending(t, env) == 0 })
	if n := env.CountStored(); n != uint64(len(ids)) {
		t.Errorf("stream holds %d messages, want %d: rows were published again", n, len(ids))
	}
	if n := r.metric(t, "outbox_relay_duplicate_acks_total"); n != 0 {
		t.Errorf("%v duplicate PubAcks: rows the stream held were published again", n)
	}
	var claims int
	if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_relay_poll_claims`).Scan(&claims); err != nil {
		t.Fatal(err)
	}
	if claims != 0 {
		t.Errorf("%d claims left", claims)
	}
	env.CheckWith(relaytest.Expect{Polled: true})
}

// TestPollLeastPrivilege: a role with what migrate --source poll
// --relay-role grants (GrantPollRole) and nothing more runs the polling
// relay.
func TestPollLeastPrivilege(t *testing.T) {
	env := pollEnv(t)
	role := "poll_" + env.Database
	connCfg, err := pgx.ParseConfig(env.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	names := migrations.Names{Table: env.Table, Publication: env.Pub}
	if err := migrations.GrantPollRole(context.Background(), connCfg, names, role); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = env.Pool.Exec(context.Background(), `DROP OWNED BY `+role)
		_, _ = env.Pool.Exec(context.Background(), `DROP ROLE `+role)
	})
	cfg := config(t, env)
	cfg.PGURL = strings.Replace(env.PGURL, "postgres://postgres@", "postgres://"+role+"@", 1)
	if cfg.PGURL == env.PGURL {
		t.Fatalf("cannot put the role in %s", env.PGURL)
	}
	env.Tx(relaytest.NewRow("order", "1", "created", `{}`))
	r := start(t, env, cfg)
	waitFor(t, "row published as "+role, 30*time.Second, func() bool { return pending(t, env) == 0 })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	m := storedMsgs(t, env)[0]
	t.Logf("Outbox-Source-System as %s: %q", role, m.Header.Get(contract.HeaderSourceSystem))
	env.CheckWith(relaytest.Expect{Polled: true})
}
