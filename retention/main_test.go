package retention_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/core"

	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/retention"
	"github.com/outbox-relay/outbox-relay/sink"
)

// server is the Postgres the tests create their databases in: a private
// cluster, or OUTBOX_TEST_PG_URL. Without Postgres the tests fail, never
// skip.
var server relaytest.Server

func TestMain(m *testing.M) {
	relaytest.RunWithServer(m, &server)
}

// relayConfig is the relay's configuration for env.
func relayConfig(t testing.TB, env *relaytest.Env) relay.Config {
	t.Helper()
	subject, err := sink.ParseTemplate(env.Subject)
	if err != nil {
		t.Fatal(err)
	}
	return relay.Config{
		PGURL: env.PGURL, Slot: env.Slot, Publication: env.Pub, Table: env.Table,
		Publishing: core.Publishing{Stream: env.Stream,
			Subject: subject, DeadLetterSubject: env.DeadSubj, DuplicateWindow: time.Second, AckTimeout: time.Second},
	}
}

// startRelay runs the relay in this process until the returned function
// stops it (also at the end of the test).
func startRelay(t testing.TB, env *relaytest.Env) (stop func()) {
	t.Helper()
	nc, err := nats.Connect(env.NATSURL, nats.MaxReconnects(-1), nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(relayConfig(t, env), core.Deps{NATS: nc, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
		nc.Close()
	}
	t.Cleanup(stop)
	waitTakenUp(t, env, done)
	return stop
}

// waitTakenUp waits until the relay has finished taking up its slot and
// confirmed all WAL written so far.
func waitTakenUp(t testing.TB, env *relaytest.Env, done chan error) {
	t.Helper()
	store := checkpoint.NewStore(env.Pool, env.Table.Schema, env.Slot)
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("the relay stopped during its start: %v", err)
		default:
		}
		rec, err := store.Load(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if rec.Bootstrapped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the relay did not take up its slot within a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
	env.WaitSlotCaughtUp(time.Minute)
}

// cleanup runs one cleanup with a week's retention.
func cleanup(t *testing.T, env *relaytest.Env, edit func(*retention.Config)) retention.Report {
	t.Helper()
	cfg := retention.Config{Table: env.Table, Slot: env.Slot, Retention: 7 * 24 * time.Hour, Batch: 2,
		Wait: 30 * time.Second, MarkProcessed: true, LockTimeout: 2 * time.Second}
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := retention.Run(ctx, env.Pool, cfg, zerolog.Nop())
	if err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	return rep
}

// insertAt commits one row created at createdAt and returns its id.
func insertAt(t *testing.T, env *relaytest.Env, createdAt time.Time, aggregate string) string {
	t.Helper()
	var id string
	err := env.Pool.QueryRow(context.Background(), `INSERT INTO `+env.Table.Quoted()+` (aggregate_type, aggregate_id, event_type, payload, created_at)
		VALUES ('order', $1, 'created', '{}', $2) RETURNING id::text`, aggregate, createdAt).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// rowIDs returns the ids in the table, and which of them have processed_at.
func rowIDs(t *testing.T, env *relaytest.Env) (ids []string, processed map[string]bool) {
	t.Helper()
	rows, err := env.Pool.Query(context.Background(), `SELECT id::text, processed_at IS NOT NULL FROM `+env.Table.Quoted()+` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	processed = map[string]bool{}
	for rows.Next() {
		var id string
		var p bool
		if err := rows.Scan(&id, &p); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		processed[id] = p
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids, processed
}

// streamIDs returns the event ids in the stream, in stream order.
func streamIDs(t *testing.T, env *relaytest.Env) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ids []string
	err := jssink.Messages(ctx, env.StreamHandle(10*time.Second), nil, func(m *jetstream.RawStreamMsg) {
		ids = append(ids, m.Header.Get(contract.HeaderMsgID))
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func has(ids []string, id string) bool { return slices.Contains(ids, id) }
