package consumer

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"
)

// fixture is a test's database (migrated, with an effects table), a
// stream holding events as the relay publishes them, and the driver its
// Consumers are made with.
type fixture struct {
	t   *testing.T
	d   driver
	env *relaytest.Env
	js  jetstream.JetStream
}

const testStream = "OUTBOX"

func newFixture(t *testing.T, d driver, streamCfg ...func(*jetstream.StreamConfig)) *fixture {
	t.Helper()
	env := relaytest.NewEnv(t, server)
	env.Exec(`CREATE TABLE effects (event_id text NOT NULL, handled_by text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`)
	cfg := jetstream.StreamConfig{Name: testStream, Subjects: []string{"outbox.>"}, Storage: jetstream.FileStorage}
	for _, f := range streamCfg {
		f(&cfg)
	}
	if _, err := env.JS.CreateStream(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, d: d, env: env, js: env.JS}
}

// newConsumer makes a Consumer on the test's database with the fixture's
// driver.
func (f *fixture) newConsumer(cons jetstream.Consumer, h testHandler, opts ...Option) (*Consumer, error) {
	f.t.Helper()
	c, closeDB, err := f.d.new(f.env.PGURL, cons, h, opts...)
	if closeDB != nil {
		f.t.Cleanup(closeDB)
	}
	return c, err
}

// consumer creates the durable pull consumer name.
func (f *fixture) consumer(name string, ackWait time.Duration) jetstream.Consumer {
	f.t.Helper()
	c, err := f.js.CreateOrUpdateConsumer(context.Background(), testStream, jetstream.ConsumerConfig{
		Durable: name, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// publish stores the relay's message for an event with this id, payload
// and aggregate, and returns its stream sequence.
func (f *fixture) publish(id, aggregateID, payload string) uint64 {
	f.t.Helper()
	ev := &decode.Event{ID: id, AggregateType: "order", AggregateID: aggregateID, EventType: "order.created",
		CreatedAt: time.Now().UTC().Format(time.RFC3339Nano), Payload: []byte(payload)}
	return f.publishMsg(jssink.EventMsg(ev, "outbox.order.order%2Ecreated"))
}

func (f *fixture) publishMsg(msg *nats.Msg) uint64 {
	f.t.Helper()
	ack, err := f.js.PublishMsg(context.Background(), msg)
	if err != nil {
		f.t.Fatal(err)
	}
	return ack.Sequence
}

// info reads the consumer's state on the server.
func (f *fixture) info(name string) *jetstream.ConsumerInfo {
	f.t.Helper()
	c, err := f.js.Consumer(context.Background(), testStream, name)
	if err != nil {
		f.t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return info
}

// settled reports whether the consumer has nothing pending or unacked up to
// seq.
func (f *fixture) settled(name string, seq uint64) bool {
	info := f.info(name)
	return info.AckFloor.Stream >= seq && info.NumAckPending == 0 && info.NumPending == 0
}

// effects counts the effects of each event.
func (f *fixture) effects() map[string]int {
	f.t.Helper()
	rows, err := f.env.Pool.Query(context.Background(), `SELECT event_id, count(*) FROM effects GROUP BY event_id`)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			f.t.Fatal(err)
		}
		out[id] = n
	}
	return out
}

func (f *fixture) count(sql string, args ...any) int {
	f.t.Helper()
	var n int
	if err := f.env.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// running is a Consumer running in the test process.
type running struct {
	cancel context.CancelFunc
	done   chan error
	logs   *relaytest.SyncBuffer
}

// run starts a Consumer on cons and stops it when the test ends.
func (f *fixture) run(cons jetstream.Consumer, h testHandler, opts ...Option) *running {
	f.t.Helper()
	logs := &relaytest.SyncBuffer{}
	opts = append([]Option{WithLogger(zerolog.New(logs).Level(zerolog.DebugLevel))}, opts...)
	c, err := f.newConsumer(cons, h, opts...)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1), logs: logs}
	go func() { r.done <- c.Run(ctx) }()
	f.t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			f.t.Error("consumer did not stop within 30 s")
		}
		if f.t.Failed() {
			f.t.Logf("consumer log:\n%s", logs.String())
		}
	})
	return r
}

// stop cancels the consumer and returns Run's result.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30 s of the cancel")
		return nil
	}
}

func eventID(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }

// A driver is one way to make a Consumer: New on a pgx pool, or NewSQL on
// a database/sql pool (pgx's stdlib driver). Every test of the consumer's
// behaviour runs with both, as subtests named after the driver.
type driver struct {
	name string
	// new makes a Consumer on a pool of its own on pgURL, which closeDB
	// closes.
	new func(pgURL string, cons jetstream.Consumer, h testHandler, opts ...Option) (c *Consumer, closeDB func(), err error)
	// serializable makes the handler's transaction serializable;
	// otherTxOptions is the other driver's transaction option.
	serializable, otherTxOptions Option
}

var drivers = []driver{
	{"pgx", func(pgURL string, cons jetstream.Consumer, h testHandler, opts ...Option) (*Consumer, func(), error) {
		pool, err := pgxpool.New(context.Background(), pgURL)
		if err != nil {
			return nil, nil, fmt.Errorf("pgx pool: %w", err)
		}
		c, err := New(pool, cons, func(ctx context.Context, tx pgx.Tx, m *Message) error {
			return h(ctx, pgxTestTx{tx}, m)
		}, opts...)
		return c, pool.Close, err
	}, WithTxOptions(pgx.TxOptions{IsoLevel: pgx.Serializable}), WithSQLTxOptions(sql.TxOptions{})},
	{"database_sql", func(pgURL string, cons jetstream.Consumer, h testHandler, opts ...Option) (*Consumer, func(), error) {
		cfg, err := pgx.ParseConfig(pgURL)
		if err != nil {
			return nil, nil, fmt.Errorf("parse %s: %w", pgURL, err)
		}
		db := stdlib.OpenDB(*cfg)
		c, err := NewSQL(db, cons, func(ctx context.Context, tx *sql.Tx, m *Message) error {
			return h(ctx, sqlTestTx{tx}, m)
		}, opts...)
		return c, func() { _ = db.Close() }, err
	}, WithSQLTxOptions(sql.TxOptions{Isolation: sql.LevelSerializable}), WithTxOptions(pgx.TxOptions{})},
}

// driverNamed returns the driver called name (for the crash test's child).
func driverNamed(name string) (driver, error) {
	for _, d := range drivers {
		if d.name == name {
			return d, nil
		}
	}
	return driver{}, fmt.Errorf("no driver %q", name)
}

// forEachDriver runs test once per driver.
func forEachDriver(t *testing.T, test func(t *testing.T, d driver)) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) { test(t, d) })
	}
}

// A testHandler is a handler the tests can hand to either driver: testTx
// runs statements in the handler's transaction.
type testHandler func(ctx context.Context, tx testTx, m *Message) error

type testTx interface {
	Exec(ctx context.Context, sql string, args ...any) error
	// IsolationLevel reads the transaction's isolation level.
	IsolationLevel(ctx context.Context) (string, error)
}

type pgxTestTx struct{ tx pgx.Tx }

func (t pgxTestTx) Exec(ctx context.Context, sql string, args ...any) error {
	_, err := t.tx.Exec(ctx, sql, args...)
	return err
}

func (t pgxTestTx) IsolationLevel(ctx context.Context) (string, error) {
	var level string
	err := t.tx.QueryRow(ctx, `SHOW transaction_isolation`).Scan(&level)
	return level, err
}

type sqlTestTx struct{ tx *sql.Tx }

func (t sqlTestTx) Exec(ctx context.Context, query string, args ...any) error {
	_, err := t.tx.ExecContext(ctx, query, args...)
	return err
}

func (t sqlTestTx) IsolationLevel(ctx context.Context) (string, error) {
	var level string
	err := t.tx.QueryRowContext(ctx, `SHOW transaction_isolation`).Scan(&level)
	return level, err
}
