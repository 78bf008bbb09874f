package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"
)

// attempts records when the handler ran for each event.
type attempts struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (a *attempts) add(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.at == nil {
		a.at = map[string][]time.Time{}
	}
	a.at[id] = append(a.at[id], time.Now())
	return len(a.at[id])
}

func (a *attempts) of(id string) []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.at[id]...)
}

// A handler that always fails: retried with growing delays, its writes
// rolled back each time; on the last delivery the message is recorded in
// failed_events and terminated, and the events after it are handled.
func TestAlwaysFailingHandlerTerminatedAndRecorded(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver) {
		f := newFixture(t, d)
		const base = 100 * time.Millisecond
		poison := eventID(1)
		seqPoison := f.publish(poison, "1", `{"bad": true}`)
		last := f.publish(eventID(2), "2", `{"bad": false}`)

		var a attempts
		effect := effectHandler("test", nil)
		h := func(ctx context.Context, tx testTx, m *Message) error {
			a.add(m.ID)
			if err := effect(ctx, tx, m); err != nil {
				return err
			}
			if m.ID == poison {
				return errors.New("cannot bill order 1")
			}
			return nil
		}
		f.run(f.consumer("billing", time.Second), h, WithMaxDeliveries(3), WithBackoff(base, time.Second))
		relaytest.WaitFor(t, 30*time.Second, "both messages settled", func() bool { return f.settled("billing", last) })

		runs := a.of(poison)
		if len(runs) != 3 {
			t.Fatalf("handler ran %d times for the poison message, want 3", len(runs))
		}
		if gap := runs[1].Sub(runs[0]); gap < base {
			t.Errorf("second delivery %s after the first, want at least %s", gap, base)
		}
		if gap := runs[2].Sub(runs[1]); gap < 2*base {
			t.Errorf("third delivery %s after the second, want at least %s (doubled)", gap, 2*base)
		}
		if eff := f.effects(); eff[poison] != 0 || eff[eventID(2)] != 1 {
			t.Fatalf("effects %v: the poison message's writes must be rolled back, the next event handled once", eff)
		}

		var rec struct {
			stream, subject, errText string
			seq, deliveries          int64
			headers                  map[string][]string
			payload                  []byte
		}
		err := f.env.Pool.QueryRow(context.Background(),
			`SELECT stream, stream_seq, subject, deliveries, error, headers, payload FROM failed_events WHERE consumer = 'billing' AND event_id = $1`, poison).
			Scan(&rec.stream, &rec.seq, &rec.subject, &rec.deliveries, &rec.errText, &rec.headers, &rec.payload)
		if err != nil {
			t.Fatalf("failed_events row: %v", err)
		}
		if rec.stream != testStream || rec.seq != int64(seqPoison) || rec.deliveries != 3 || rec.errText != "cannot bill order 1" ||
			string(rec.payload) != `{"bad": true}` || rec.headers["Nats-Msg-Id"][0] != poison || rec.subject != "outbox.order.order%2Ecreated" {
			t.Fatalf("failed_events row %+v", rec)
		}
		if n := f.count(`SELECT count(*) FROM processed_events WHERE event_id = $1`, poison); n != 0 {
			t.Fatal("the failed event is in processed_events")
		}

		// Terminated: no delivery after the third, also past AckWait.
		time.Sleep(1500 * time.Millisecond)
		if n := len(a.of(poison)); n != 3 {
			t.Fatalf("handler ran %d times after the message was terminated", n)
		}
	})
}

// A handler that fails twice and then succeeds has its effect once.
func TestRetryThenSuccess(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver) {
		f := newFixture(t, d)
		id := eventID(1)
		last := f.publish(id, "1", `{}`)
		var a attempts
		effect := effectHandler("test", nil)
		h := func(ctx context.Context, tx testTx, m *Message) error {
			if err := effect(ctx, tx, m); err != nil {
				return err
			}
			if a.add(m.ID) < 3 {
				return errors.New("not yet")
			}
			return nil
		}
		f.run(f.consumer("billing", time.Second), h, WithBackoff(20*time.Millisecond, time.Second))
		relaytest.WaitFor(t, 30*time.Second, "message settled", func() bool { return f.settled("billing", last) })
		if n := len(a.of(id)); n != 3 {
			t.Fatalf("handler ran %d times, want 3", n)
		}
		if eff := f.effects(); eff[id] != 1 {
			t.Fatalf("effects %v, want one", eff)
		}
		if n := f.count(`SELECT count(*) FROM failed_events`); n != 0 {
			t.Fatalf("%d failed events, want 0", n)
		}
	})
}

// Permanent errors and messages without a Nats-Msg-Id are recorded and
// terminated at their first delivery; a panicking handler counts as
// failing.
func TestPermanentNoIDAndPanic(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver) {
		f := newFixture(t, d)
		permanent, panicky := eventID(1), eventID(2)
		f.publish(permanent, "1", `{}`)
		f.publish(panicky, "2", `{}`)
		noID := f.publishMsg(&nats.Msg{Subject: "outbox.order.x", Data: []byte("not from the relay")})
		var a attempts
		h := func(ctx context.Context, tx testTx, m *Message) error {
			a.add(m.ID)
			switch m.ID {
			case permanent:
				return Permanent(errors.New("unknown currency"))
			case panicky:
				panic("nil map")
			}
			return nil
		}
		f.run(f.consumer("billing", time.Second), h, WithMaxDeliveries(2), WithBackoff(10*time.Millisecond, 10*time.Millisecond))
		relaytest.WaitFor(t, 30*time.Second, "messages settled", func() bool { return f.settled("billing", noID) })

		if len(a.of(permanent)) != 1 || len(a.of(panicky)) != 2 || len(a.of("")) != 0 {
			t.Fatalf("handler runs: %v", a.at)
		}
		want := map[string]string{
			permanent:         "permanent: unknown currency",
			panicky:           "handler panicked: nil map",
			testStream + ":3": "message has no Nats-Msg-Id: it cannot be deduplicated",
		}
		for id, errText := range want {
			var got string
			if err := f.env.Pool.QueryRow(context.Background(), `SELECT error FROM failed_events WHERE event_id = $1`, id).Scan(&got); err != nil || got != errText {
				t.Errorf("failed event %s: %q (%v), want %q", id, got, err, errText)
			}
		}
	})
}

// A message stored twice in the stream (republished after the duplicate
// window) has its effect once.
func TestDuplicateInStream(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver) {
		f := newFixture(t, d, func(c *jetstream.StreamConfig) { c.Duplicates = 100 * time.Millisecond })
		id := eventID(1)
		first := f.publish(id, "1", `{}`)
		time.Sleep(300 * time.Millisecond)
		second := f.publish(id, "1", `{}`)
		if second == first {
			t.Fatal("the stream deduplicated the republish: the test needs two copies")
		}
		seen := make(chan string, 10)
		r := f.run(f.consumer("billing", time.Second), effectHandler("test", seen))
		relaytest.WaitFor(t, 30*time.Second, "both copies acked", func() bool { return f.settled("billing", second) })
		if eff := f.effects(); eff[id] != 1 || len(seen) != 1 {
			t.Fatalf("effects %v, handler runs %d: want 1 and 1", eff, len(seen))
		}
		if !logged(r.logs.String(), id, "already processed; acknowledging") {
			t.Fatalf("the second copy was not skipped as processed:\n%s", r.logs.String())
		}
	})
}

// Several consumers with their own names each handle every event once,
// through the same processed_events table.
func TestConsumersShareTable(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver) {
		f := newFixture(t, d)
		var last uint64
		for i := 1; i <= 20; i++ {
			last = f.publish(eventID(i), "1", `{}`)
		}
		f.run(f.consumer("billing", time.Second), effectHandler("billing", nil))
		f.run(f.consumer("shipping", time.Second), effectHandler("shipping", nil))
		relaytest.WaitFor(t, 30*time.Second, "both consumers done", func() bool { return f.settled("billing", last) && f.settled("shipping", last) })
		if n := f.count(`SELECT count(*) FROM (SELECT DISTINCT event_id, handled_by FROM effects) e`); n != 40 {
			t.Fatalf("%d distinct effects, want 40", n)
		}
		if n := f.count(`SELECT count(*) FROM effects`); n != 40 {
			t.Fatalf("%d effects, want 40", n)
		}
	})
}

// Cancelling Run lets the message in hand finish, commit and be acked,
// and Run returns nil.
func TestDrainOnCancel(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver) {
		f := newFixture(t, d)
		id := eventID(1)
		seq := f.publish(id, "1", `{}`)
		entered, release := make(chan struct{}), make(chan struct{})
		effect := effectHandler("test", nil)
		h := func(ctx context.Context, tx testTx, m *Message) error {
			close(entered)
			<-release
			return effect(ctx, tx, m)
		}
		r := f.run(f.consumer("billing", 10*time.Second), h)
		<-entered
		r.cancel()
		time.Sleep(100 * time.Millisecond)
		close(release)
		if err := r.stop(t); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if eff := f.effects(); eff[id] != 1 {
			t.Fatalf("effects %v", eff)
		}
		if info := f.info("billing"); info.AckFloor.Stream != seq || info.NumAckPending != 0 {
			t.Fatalf("ack floor %d, %d pending acks: want the message acked when Run returns", info.AckFloor.Stream, info.NumAckPending)
		}
	})
}

// A handler that does not finish within the drain timeout sees its
// context cancelled; its message is naked, nothing committed.
func TestDrainTimeout(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver) {
		f := newFixture(t, d)
		id := eventID(1)
		f.publish(id, "1", `{}`)
		entered := make(chan struct{})
		effect := effectHandler("test", nil)
		h := func(ctx context.Context, tx testTx, m *Message) error {
			if err := effect(ctx, tx, m); err != nil {
				return err
			}
			close(entered)
			<-ctx.Done()
			return ctx.Err()
		}
		r := f.run(f.consumer("billing", 10*time.Second), h, WithDrainTimeout(200*time.Millisecond))
		<-entered
		start := time.Now()
		if err := r.stop(t); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("Run took %s to return after the cancel", took)
		}
		if eff := f.effects(); len(eff) != 0 {
			t.Fatalf("effects %v after a cancelled handler", eff)
		}
		if n := f.count(`SELECT count(*) FROM processed_events`); n != 0 {
			t.Fatal("a cancelled handler's event is marked processed")
		}
	})
}

func TestNewRefuses(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver) {
		f := newFixture(t, d)
		ctx := context.Background()
		h := effectHandler("test", nil)
		create := func(cfg jetstream.ConsumerConfig) jetstream.Consumer {
			c, err := f.js.CreateOrUpdateConsumer(ctx, testStream, cfg)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		cases := []struct {
			name string
			cons jetstream.Consumer
			opts []Option
			want string
		}{
			{"ephemeral", create(jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy}), nil, "ephemeral"},
			{"ack none", create(jetstream.ConsumerConfig{Durable: "a", AckPolicy: jetstream.AckNonePolicy}), nil, "ack policy"},
			{"max deliver", create(jetstream.ConsumerConfig{Durable: "b", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 5}), nil, "MaxDeliver"},
			{"bad schema", create(jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy}), []Option{WithSchema("Bad-Schema")}, "schema"},
			{"bad backoff", create(jetstream.ConsumerConfig{Durable: "d", AckPolicy: jetstream.AckExplicitPolicy}), []Option{WithBackoff(time.Second, time.Millisecond)}, "backoff"},
		}
		cases = append(cases, struct {
			name string
			cons jetstream.Consumer
			opts []Option
			want string
		}{"the other driver's tx options", create(jetstream.ConsumerConfig{Durable: "e", AckPolicy: jetstream.AckExplicitPolicy}), []Option{d.otherTxOptions}, "is for New"})
		for _, c := range cases {
			if _, err := f.newConsumer(c.cons, h, c.opts...); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v, want an error about %s", c.name, err, c.want)
			}
		}
		// An ephemeral consumer with a name of its own is fine.
		if _, err := f.newConsumer(cases[0].cons, h, WithName("billing")); err != nil {
			t.Errorf("ephemeral with WithName: %v", err)
		}
	})
}

// Run checks the tables first: missing, or the article's processed_events
// keyed by event_id alone, is an error that says what to do.
func TestRunChecksTables(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver) {
		f := newFixture(t, d)
		cons := f.consumer("billing", time.Second)
		run := func() error {
			c, err := f.newConsumer(cons, effectHandler("test", nil))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return c.Run(ctx)
		}
		f.env.Exec(`DROP TABLE failed_events`)
		if err := run(); err == nil || !strings.Contains(err.Error(), "failed_events does not exist") || !strings.Contains(err.Error(), "migrate") {
			t.Fatalf("without failed_events: %v", err)
		}
		f.env.Exec(`DROP TABLE processed_events`)
		f.env.Exec(`CREATE TABLE failed_events (x int)`)
		if err := run(); err == nil || !strings.Contains(err.Error(), "processed_events does not exist") {
			t.Fatalf("without processed_events: %v", err)
		}
		// The article's table, widened by hand but still keyed by event_id.
		f.env.Exec(`CREATE TABLE processed_events (event_id uuid PRIMARY KEY, consumer text NOT NULL DEFAULT '', processed_at timestamptz NOT NULL DEFAULT NOW())`)
		f.env.Exec(`CREATE UNIQUE INDEX ON processed_events (consumer, event_id)`)
		if err := run(); err == nil || !strings.Contains(err.Error(), "unique key on (event_id) without consumer") {
			t.Fatalf("article's table: %v", err)
		}
	})
}

func TestDelay(t *testing.T) {
	c := &Consumer{backoff: time.Second, maxBackoff: 10 * time.Second}
	for delivered, want := range map[uint64]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 1000: 10 * time.Second} {
		if got := c.delay(delivered); got != want {
			t.Errorf("delay after delivery %d: %s, want %s", delivered, got, want)
		}
	}
}

// The handler sees the row's values, percent-encoding undone.
func TestMessageFields(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver) {
		f := newFixture(t, d)
		id := eventID(1)
		seq := f.publish(id, " spaced\tid ", `{"a": 1}`)
		got := make(chan *Message, 1)
		f.run(f.consumer("billing", time.Second), func(ctx context.Context, tx testTx, m *Message) error {
			got <- m
			return nil
		})
		m := <-got
		if m.ID != id || m.AggregateType != "order" || m.AggregateID != " spaced\tid " || m.EventType != "order.created" ||
			m.Stream != testStream || m.StreamSeq != seq || m.Delivered != 1 || !json.Valid(m.Data) {
			t.Fatalf("message %+v", m)
		}
	})
}

// The handler's transaction has the options given: WithTxOptions for New,
// WithSQLTxOptions for NewSQL.
func TestTxOptions(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver) {
		f := newFixture(t, d)
		last := f.publish(eventID(1), "1", `{}`)
		levels := make(chan string, 10)
		f.run(f.consumer("billing", time.Second), func(ctx context.Context, tx testTx, m *Message) error {
			level, err := tx.IsolationLevel(ctx)
			levels <- level
			return err
		}, d.serializable)
		relaytest.WaitFor(t, 30*time.Second, "message settled", func() bool { return f.settled("billing", last) })
		if level := <-levels; level != "serializable" {
			t.Fatalf("the handler's transaction is %q, want serializable", level)
		}
	})
}

// A message in the CloudEvents form yields the fields of the relay's own
// form, and its attributes decoded; a CloudEvent of another producer,
// without the relay's headers, gives its subject and type.
func TestMessageFieldsCloudEvents(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d driver) {
		f := newFixture(t, d)
		ev := &decode.Event{ID: eventID(1), AggregateType: "ordér", AggregateID: " Zoë \"42\"\t", EventType: "order.créé",
			CreatedAt: "2026-12-02T11:36:09.5Z", Payload: []byte(`{"a": "😀"}`),
			Headers: []decode.Header{{Name: "TraceParent", Value: "00-abc-01"}, {Name: "X-Request-Id", Value: "r 1"}}}
		format := jssink.Format{CloudEvents: true, CESource: "/postgres/app db/public.outbox_events"}
		f.publishMsg(jssink.EventMsg(ev, "outbox.order.1"))
		ev2 := *ev
		ev2.ID = eventID(2) // a second id: JetStream and processed_events would take the same one for a duplicate
		f.publishMsg(jssink.FormatEventMsg(&ev2, "outbox.order.2", format))
		foreign := nats.NewMsg("outbox.other.3")
		foreign.Header.Set(contract.HeaderMsgID, eventID(3))
		for k, v := range map[string]string{"Ce-Specversion": "1.0", "ce-id": "x", "ce-source": "/elsewhere", "ce-type": `"com.example.a b"`, "ce-subject": "s%C3%BCb"} {
			foreign.Header[k] = []string{v}
		}
		foreign.Data = []byte(`{}`)
		last := f.publishMsg(foreign)
		got := make(chan *Message, 3)
		f.run(f.consumer("billing", time.Second), func(ctx context.Context, tx testTx, m *Message) error {
			got <- m
			return nil
		})
		relaytest.WaitFor(t, 30*time.Second, "messages settled", func() bool { return f.settled("billing", last) })
		if len(got) != 3 {
			t.Fatalf("%d messages handled, want 3", len(got))
		}
		own, ce, other := <-got, <-got, <-got
		same := func(m *Message, id string) bool {
			return m.ID == id && m.AggregateType == ev.AggregateType && m.AggregateID == ev.AggregateID && m.EventType == ev.EventType &&
				string(m.Data) == string(ev.Payload)
		}
		if !same(own, ev.ID) || !same(ce, ev2.ID) || own.CloudEvent != nil {
			t.Fatalf("own form %+v\nCloudEvents form %+v", own, ce)
		}
		want := map[string]string{"specversion": "1.0", "id": ev2.ID, "source": format.CESource, "type": ev.EventType,
			"subject": ev.AggregateID, "time": ev.CreatedAt, "datacontenttype": "application/json", "traceparent": "00-abc-01"}
		if !maps.Equal(ce.CloudEvent, want) {
			t.Errorf("attributes %v, want %v", ce.CloudEvent, want)
		}
		if ce.Header.Get("X-Request-Id") != "r 1" {
			t.Errorf("a header no extension can carry is not a plain header: %v", ce.Header)
		}
		if other.ID != eventID(3) || other.EventType != "com.example.a b" || other.AggregateID != "süb" || other.CloudEvent["source"] != "/elsewhere" {
			t.Errorf("another producer's CloudEvent: %+v", other)
		}
	})
}
