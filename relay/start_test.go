package relay

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
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
	got, err := takeUpWatched(ctx, env, cfg)
	return got.action, err
}

// takeUpStats is what one take-up did, as its metrics and its log say.
type takeUpStats struct {
	action checkpoint.Action
	// pubAcks counts the PubAcks of messages the stream stored, duplicates
	// those of copies it already held (sink.Metrics).
	pubAcks, duplicates int
	// fromTable is the "published" field of the line that ends a slot's
	// creation: the rows published from its snapshot; -1 without one.
	fromTable int
}

// takeUpWatched is takeUpOnce, reading the take-up's metrics and log.
func takeUpWatched(ctx context.Context, env *relaytest.Env, cfg Config) (got takeUpStats, err error) {
	got.fromTable = -1
	nc, err := nats.Connect(env.NATSURL, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1))
	if err != nil {
		return got, err
	}
	defer nc.Close()
	reg := prometheus.NewRegistry()
	var logs relaytest.SyncBuffer
	r, err := New(cfg, core.Deps{NATS: nc, Registry: reg, Log: zerolog.New(&logs)})
	if err != nil {
		return got, err
	}
	defer func() { // once the relay's parts stopped: every PubAck counted
		got.pubAcks = counterValue(reg, "outbox_relay_events_published_total")
		got.duplicates = counterValue(reg, relaytest.DuplicateAcksMetric)
		got.fromTable = loggedPublished(logs.String())
	}()
	bg := core.NewGroup(ctx)
	defer bg.Stop()
	up, err := r.takeUp(ctx, bg)
	if up == nil {
		return got, err
	}
	defer up.close()
	got.action = up.action
	return got, err
}

// counterValue is the value of the counter name in reg, 0 when absent.
func counterValue(reg *prometheus.Registry, name string) int {
	families, err := reg.Gather()
	if err != nil {
		return -1
	}
	for _, f := range families {
		if f.GetName() == name {
			return int(f.GetMetric()[0].GetCounter().GetValue())
		}
	}
	return 0
}

// loggedPublished returns the "published" field of the log line that ends
// a slot's creation (starter.createAndPublish), -1 when there is none.
func loggedPublished(logs string) int {
	for _, line := range strings.Split(logs, "\n") {
		var entry struct {
			Published *int  `json:"published"`
			Redo      *bool `json:"redo"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Published != nil && entry.Redo != nil {
			return *entry.Published
		}
	}
	return -1
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

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := takeUpWatched(ctx, env, cfg)
	if err != nil || got.action != checkpoint.Resume {
		t.Fatalf("the next start: %s, %v; want %s", got.action, err, checkpoint.Resume)
	}
	// Within the duplicate window: a copy would be dropped, but its
	// PubAck counted.
	if n := env.CountStored(); n != before || got.pubAcks != 0 || got.duplicates != 0 {
		t.Fatalf("resuming: the stream went from %d to %d messages, %d PubAcks and %d duplicate PubAcks; want nothing published", before, n, got.pubAcks, got.duplicates)
	}
}

// An interrupted first start (NATS goes away while the rows present at
// the slot's creation are being published) leaves the record unfinished;
// the next start, after the stream's duplicate window, redoes it and
// publishes only the rows the stream lacks: a copy of a row it holds
// would be stored twice, and counted.
func TestStartRedoesAnInterruptedBootstrap(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	const rows = 20000
	env.Exec(`INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', (i % 100)::text, 'created', jsonb_build_object('i', i) FROM generate_series(1, $1) i`, rows)
	cfg := testConfig(t, env) // a 1 s duplicate window

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	failed := make(chan error, 1)
	go func() {
		_, err := takeUpOnce(ctx, env, cfg)
		failed <- err
	}()
	waitFor(t, time.Minute, "the take-up to publish rows", func() bool { return env.CountStored() >= 100 })
	env.NATS.Stop()
	stopped := time.Now()
	time.AfterFunc(2*time.Second, cancel)
	if err := <-failed; err == nil {
		t.Fatal("the bootstrap finished although NATS stopped during it")
	}
	if rec := loadRecord(t, env); !rec.Exists || rec.Bootstrapped {
		t.Fatalf("record after the interrupted bootstrap: %+v, want unfinished", rec)
	}
	holdPast(stopped, cfg.DuplicateWindow)
	if err := env.NATS.Start(); err != nil {
		t.Fatal(err)
	}
	missing := requireMissingOnce(t, env, cfg, rows)

	redoCtx, cancelRedo := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancelRedo()
	got, err := takeUpWatched(redoCtx, env, cfg)
	if err != nil || got.action != checkpoint.RedoBootstrap {
		t.Fatalf("the next start: %s, %v; want %s", got.action, err, checkpoint.RedoBootstrap)
	}
	if rec := loadRecord(t, env); !rec.Bootstrapped {
		t.Fatalf("record not bootstrapped after the redo: %+v", rec)
	}
	requirePublishedOnly(t, got, len(missing))
	if rep := env.Check(); rep.Messages != rows {
		t.Errorf("stream holds %d messages, want the %d rows once each", rep.Messages, rows)
	}
}

// requireMissingOnce compares the table with the stream after an
// interrupted take-up of rows rows: the stream holds some of them, none
// twice. It returns the ids the stream lacks.
func requireMissingOnce(t *testing.T, env *relaytest.Env, cfg Config, rows int) []string {
	t.Helper()
	rep := compare(t, env, cfg)
	if len(rep.Duplicates) > 0 {
		t.Fatalf("the interrupted take-up stored %d rows twice: %v", len(rep.Duplicates), rep.Duplicates)
	}
	if len(rep.Missing) == 0 || len(rep.Missing) == rows {
		t.Fatalf("the stream lacks %d of the %d rows: NATS stopped too early or too late to interrupt anything", len(rep.Missing), rows)
	}
	t.Logf("interrupted with %d of the %d rows in the stream", rows-len(rep.Missing), rows)
	return rep.Missing
}

// holdPast keeps NATS stopped until twice the stream's duplicate window
// has passed since the last publish (NATS stopped then): not
// synchronisation, the fault itself. A copy of a stored row published
// after it is stored again, where the check sees it.
func holdPast(lastPublish time.Time, window time.Duration) {
	time.Sleep(time.Until(lastPublish.Add(2 * window)))
}

// requirePublishedOnly fails unless a take-up published exactly the
// missing rows: as many stored as it logged from the table, and no copy
// of a row the stream held (a duplicate PubAck).
func requirePublishedOnly(t *testing.T, got takeUpStats, missing int) {
	t.Helper()
	if got.fromTable != missing || got.pubAcks != missing || got.duplicates != 0 {
		t.Fatalf("the take-up published %d rows from the table, %d stored and %d acknowledged as duplicates; want the %d rows the stream lacked, each stored, none a duplicate",
			got.fromTable, got.pubAcks, got.duplicates, missing)
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
