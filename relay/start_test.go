package relay

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/core"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/sink"
)

// The start-up decisions, against real Postgres and JetStream, without the
// binary: each test takes up the slot the way Run does and looks at what
// the slot, the relay's record and the stream hold afterwards.

// testConfig is the relay's configuration for env.
func testConfig(t *testing.T, env *relaytest.Env) Config {
	t.Helper()
	subject, err := sink.ParseTemplate(env.Subject)
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		PGURL: env.PGURL, Slot: env.Slot, Publication: env.Pub, Table: env.Table,
		Publishing: core.Publishing{Stream: env.Stream,
			Subject: subject, DeadLetterSubject: env.DeadSubj, DuplicateWindow: time.Second,
			AckTimeout: time.Second},
	}
}

// takeUpOnce takes up the slot as a relay started with cfg would, then
// stops the relay's background parts and releases its connections.
// It is safe to call from any goroutine.
func takeUpOnce(ctx context.Context, env *relaytest.Env, cfg Config) (checkpoint.Action, error) {
	nc, err := nats.Connect(env.NATSURL, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1))
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	r, err := New(cfg, core.Deps{NATS: nc, Log: zerolog.Nop()})
	if err != nil {
		return 0, err
	}
	bg := core.NewGroup(ctx)
	defer bg.Stop()
	up, err := r.takeUp(ctx, bg)
	if up == nil {
		return 0, err
	}
	defer up.close()
	return up.action, err
}

func mustTakeUp(t *testing.T, env *relaytest.Env, cfg Config, want checkpoint.Action) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := takeUpOnce(ctx, env, cfg)
	if err != nil {
		t.Fatalf("take up the slot: %v", err)
	}
	if got != want {
		t.Fatalf("action %s, want %s", got, want)
	}
}

func loadRecord(t *testing.T, env *relaytest.Env) checkpoint.Record {
	t.Helper()
	rec, err := checkpoint.NewStore(env.Pool, env.Table.Schema, env.Slot).Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func TestStartFreshSlotPublishesUnprocessedRows(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	pending := env.Tx(relaytest.NewRow("order", "1", "created", `{"n":1}`), relaytest.NewRow("order", "1", "paid", `{"n":2}`))
	env.Exec(`INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, processed_at) VALUES ('order', '2', 'old', '{}', now())`)

	mustTakeUp(t, env, testConfig(t, env), checkpoint.Bootstrap)

	slot := env.SlotInfo()
	rec := loadRecord(t, env)
	if !slot.Exists || !rec.Exists || !rec.Bootstrapped {
		t.Fatalf("slot exists %v, record %+v: want both, bootstrapped", slot.Exists, rec)
	}
	if rec.CreatedLSN != slot.ConfirmedFlush {
		t.Errorf("record's creation point %s, slot at %s", rec.CreatedLSN, slot.ConfirmedFlush)
	}
	if got := env.CountStored(); got != uint64(len(pending)) {
		t.Fatalf("stream holds %d messages, want the %d unprocessed rows", got, len(pending))
	}
}

func TestStartResumesItsSlot(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	env.Tx(relaytest.NewRow("order", "1", "created", `{}`))
	cfg := testConfig(t, env)
	mustTakeUp(t, env, cfg, checkpoint.Bootstrap)
	before := env.CountStored()

	mustTakeUp(t, env, cfg, checkpoint.Resume)
	if got := env.CountStored(); got != before {
		t.Fatalf("resuming published %d messages again", got-before)
	}
}

// An interrupted first start (NATS goes away while the rows present at
// the slot's creation are being published) leaves the record unfinished;
// the next start redoes it and every row reaches the stream.
func TestStartRedoesAnInterruptedBootstrap(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	const rows = 20000
	env.Exec(`INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', (i % 100)::text, 'created', jsonb_build_object('i', i) FROM generate_series(1, $1) i`, rows)
	cfg := testConfig(t, env)
	cfg.DuplicateWindow = time.Minute

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	failed := make(chan error, 1)
	go func() {
		_, err := takeUpOnce(ctx, env, cfg)
		failed <- err
	}()
	waitFor(t, 30*time.Second, "the take-up to record its new slot", func() bool { return loadRecord(t, env).Exists })
	env.NATS.Stop()
	time.AfterFunc(2*time.Second, cancel)
	if err := <-failed; err == nil {
		t.Fatal("the bootstrap finished although NATS stopped during it")
	}
	if rec := loadRecord(t, env); !rec.Exists || rec.Bootstrapped {
		t.Fatalf("record after the interrupted bootstrap: %+v, want unfinished", rec)
	}
	if got := env.CountStored(); got >= rows {
		t.Fatalf("the stream holds %d messages: NATS stopped too late to interrupt anything", got)
	}
	if err := env.NATS.Start(); err != nil {
		t.Fatal(err)
	}

	mustTakeUp(t, env, cfg, checkpoint.RedoBootstrap)
	if rec := loadRecord(t, env); !rec.Bootstrapped {
		t.Fatalf("record not bootstrapped after the redo: %+v", rec)
	}
	if rep := env.Check(); rep.Messages != rows {
		t.Errorf("stream holds %d messages, want the %d rows once each", rep.Messages, rows)
	}
}

// waitFor is relaytest.WaitFor under the name this package's tests use.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	relaytest.WaitFor(t, timeout, what, cond)
}

// A slot that was dropped, recreated or moved by someone else after the
// relay streamed from it cannot be trusted: start-up refuses with a gap.
func TestStartRefusesASlotItCannotTrust(t *testing.T) {
	cases := []struct {
		name  string
		fault func(t *testing.T, env *relaytest.Env)
	}{
		{"dropped", func(t *testing.T, env *relaytest.Env) {
			env.Exec(`SELECT pg_drop_replication_slot($1)`, env.Slot)
		}},
		{"recreated", func(t *testing.T, env *relaytest.Env) {
			env.Exec(`SELECT pg_drop_replication_slot($1)`, env.Slot)
			writeOtherWAL(env)
			env.Exec(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, env.Slot)
		}},
		{"advanced", func(t *testing.T, env *relaytest.Env) {
			writeOtherWAL(env)
			env.Exec(`SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())`, env.Slot)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := relaytest.NewEnv(t, server)
			env.Tx(relaytest.NewRow("order", "1", "created", `{}`))
			cfg := testConfig(t, env)
			mustTakeUp(t, env, cfg, checkpoint.Bootstrap)
			tc.fault(t, env)

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := takeUpOnce(ctx, env, cfg)
			if !errors.Is(err, contract.ErrGap) {
				t.Fatalf("start-up after the slot was %s: %v, want a gap", tc.name, err)
			}
		})
	}
}

// writeOtherWAL writes more WAL than the ledger's slack, in a table outside
// the publication.
func writeOtherWAL(env *relaytest.Env) {
	env.Exec(`CREATE TABLE IF NOT EXISTS other_wal (v text)`)
	env.Exec(`INSERT INTO other_wal SELECT repeat('x', 1000) FROM generate_series(1, 200)`)
}
