package relay

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/verify"
)

// insertRows writes n unprocessed rows in one statement, created at the
// given SQL time expression.
func insertRows(env *relaytest.Env, n int, createdAt string) {
	env.Exec(`INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, created_at)
		SELECT 'order', (i % 100)::text, 'created', jsonb_build_object('i', i), `+createdAt+` FROM generate_series(1, $1) i`, n)
}

type takeUpResult struct {
	takeUpStats
	err error
}

// goTakeUp takes up the slot on a goroutine of its own.
func goTakeUp(ctx context.Context, env *relaytest.Env, cfg Config) <-chan takeUpResult {
	done := make(chan takeUpResult, 1)
	go func() {
		got, err := takeUpWatched(ctx, env, cfg)
		done <- takeUpResult{got, err}
	}()
	return done
}

// Two instances starting together: while the first publishes the rows
// present at its slot's creation (its slot inactive, its record
// unfinished), the second must neither start over nor touch that slot. It
// waits for the take-up to finish, then resumes the first one's slot,
// publishing nothing: the first stored every row once, the second sent
// none again (a copy would come back as a duplicate PubAck within the
// stream's duplicate window, and be stored twice after it).
func TestTwoInstancesTakeUpInTurn(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	const rows = 30000
	insertRows(env, rows, "now()")
	cfg := testConfig(t, env) // a 1 s duplicate window
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	first := goTakeUp(ctx, env, cfg)
	waitFor(t, time.Minute, "the first instance to record its new slot", func() bool {
		r := loadRecord(t, env)
		return r.Exists && r.CreatedLSN != 0
	})
	created := loadRecord(t, env).CreatedLSN
	second := goTakeUp(ctx, env, cfg)

	a := <-first
	if a.err != nil || a.action != checkpoint.Bootstrap {
		t.Fatalf("first instance: %s, %v; want bootstrap", a.action, a.err)
	}
	requirePublishedOnly(t, a.takeUpStats, rows)
	b := <-second
	if b.err != nil || b.action != checkpoint.Resume {
		t.Fatalf("second instance: %s, %v; want resume, after the first finished", b.action, b.err)
	}
	if b.fromTable != -1 || b.pubAcks != 0 || b.duplicates != 0 {
		t.Fatalf("the second instance, resuming, published %d rows from the table (-1: it created no slot), %d stored and %d acknowledged as duplicates; want none",
			b.fromTable, b.pubAcks, b.duplicates)
	}
	rec := loadRecord(t, env)
	if !rec.Bootstrapped || rec.CreatedLSN != created || env.SlotInfo().ConfirmedFlush != created {
		t.Fatalf("record %+v, slot at %s; want the first instance's slot created at %s, finished", rec, env.SlotInfo().ConfirmedFlush, created)
	}
	if rep := env.Check(); rep.Messages != rows {
		t.Errorf("stream holds %d messages, want the %d rows once each", rep.Messages, rows)
	}
}

// A repair interrupted at any point is redone as a repair, with its bound,
// by the next plain start after the stream's duplicate window: rows the
// stream lacks are published once, rows created before the bound are left
// alone, nothing is published twice.
func TestInterruptedRepairIsRedoneAsRepair(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	insertRows(env, 50, "'2000-01-01'")
	cfg := testConfig(t, env) // a 1 s duplicate window
	mustTakeUp(t, env, cfg, checkpoint.Bootstrap)
	// The broker loses one old event; a repair bounded to recent rows must
	// not bring it back.
	lostOld := deleteOneMessage(t, env)
	const rows = 20000
	insertRows(env, rows, "now()")

	repair := cfg
	repair.Repair, repair.RepairSince = true, time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := goTakeUp(ctx, env, repair)
	waitFor(t, time.Minute, "the repair to publish rows", func() bool {
		r := loadRecord(t, env)
		return r.Kind == checkpoint.KindRepair && r.CreatedLSN != 0 && env.CountStored() >= 49+100
	})
	env.NATS.Stop()
	stopped := time.Now()
	time.AfterFunc(2*time.Second, cancel)
	if r := <-done; r.err == nil {
		t.Fatal("the repair finished although NATS stopped during it")
	}
	holdPast(stopped, cfg.DuplicateWindow)
	if err := env.NATS.Start(); err != nil {
		t.Fatal(err)
	}
	missing := requireMissingOnce(t, env, cfg, rows+50)
	if !slices.Contains(missing, lostOld) || len(missing) == 1 {
		t.Fatalf("the stream lacks %d rows after the interrupted repair; want %s among them (deleted before it, older than its bound) and rows the repair did not reach", len(missing), lostOld)
	}

	redoCtx, cancelRedo := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancelRedo()
	got, err := takeUpWatched(redoCtx, env, cfg) // a plain start
	if err != nil || got.action != checkpoint.RedoRepair {
		t.Fatalf("the next start: %s, %v; want %s", got.action, err, checkpoint.RedoRepair)
	}
	requirePublishedOnly(t, got, len(missing)-1) // all but lostOld
	rep := compare(t, env, cfg)
	if len(rep.Missing) != 1 || rep.Missing[0] != lostOld || len(rep.Duplicates) != 0 {
		t.Fatalf("after the redone repair: missing %v (want only %s, older than the bound), duplicates %v", rep.Missing, lostOld, rep.Duplicates)
	}
}

// compare compares the table with the stream, leaving the judgement to
// the caller.
func compare(t *testing.T, env *relaytest.Env, cfg Config) verify.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := verify.Run(ctx, env.Pool, jetstream.NewReader(env.JS, env.StreamHandle(10*time.Second), cfg.Subject.Filter(), cfg.DeadLetterSubject, nil), verify.Options{
		Table: cfg.Table})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// deleteOneMessage deletes the stream's first message and returns its id.
func deleteOneMessage(t *testing.T, env *relaytest.Env) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream := env.StreamHandle(10 * time.Second)
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, err := stream.GetMsg(ctx, info.State.FirstSeq)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteMsg(ctx, m.Sequence); err != nil {
		t.Fatal(err)
	}
	return m.Header.Get("Nats-Msg-Id")
}

// A publication changed while the relay was stopped may have let pgoutput
// skip inserts: the next start refuses with a gap, whatever the change
// left behind looks like.
func TestPublicationChangedWhileStopped(t *testing.T) {
	type change struct {
		name   string
		change []string
	}
	cases := []change{
		{"table dropped and added back", []string{
			`ALTER PUBLICATION outbox_pub DROP TABLE outbox_events`,
			`ALTER PUBLICATION outbox_pub ADD TABLE outbox_events`}},
		{"inserts switched off and back on", []string{
			`ALTER PUBLICATION outbox_pub SET (publish = 'update')`,
			`ALTER PUBLICATION outbox_pub SET (publish = 'insert')`}},
		{"publication recreated", []string{
			`DROP PUBLICATION outbox_pub`,
			`CREATE PUBLICATION outbox_pub FOR TABLE outbox_events WITH (publish = 'insert')`}},
	}
	// Row filters exist from Postgres 15 on; older servers cannot make
	// that change at all.
	if serverVersion(t) >= 150000 {
		cases = append(cases, change{"row filter added", []string{
			`ALTER PUBLICATION outbox_pub SET TABLE outbox_events WHERE (aggregate_type <> 'secret')`}})
	} else {
		t.Log("row filter case not applicable: Postgres before 15 has no row filters")
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := relaytest.NewEnv(t, server)
			cfg := testConfig(t, env)
			mustTakeUp(t, env, cfg, checkpoint.Bootstrap)
			mustTakeUp(t, env, cfg, checkpoint.Resume) // unchanged: resumes
			for _, sql := range tc.change {
				env.Exec(sql)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := takeUpOnce(ctx, env, cfg)
			if !errors.Is(err, contract.ErrGap) {
				t.Fatalf("start-up after the publication changed: %v, want a gap", err)
			}
		})
	}
}

// serverVersion returns the test server's server_version_num.
func serverVersion(t *testing.T) int {
	t.Helper()
	env := relaytest.NewEnv(t, server)
	var v int
	if err := env.Pool.QueryRow(context.Background(), `SELECT current_setting('server_version_num')::int`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// An instance that waits for another's take-up (which can last as long as
// publishing a table from a snapshot) holds no WAL sender meanwhile: the
// replication connection it opened ahead for its first session is closed
// before the wait, so the other instance can create its slot under a
// tight max_wal_senders.
func TestWaitingInstanceHoldsNoWALSender(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	cfg := testConfig(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	other, err := env.Pool.Acquire(ctx) // another instance, taking up the slot
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	if _, err := other.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, lockKey(cfg.Slot)); err != nil {
		t.Fatal(err)
	}
	taken := goTakeUp(ctx, env, cfg)
	waitFor(t, 30*time.Second, "the instance waiting for the take-up lock without a WAL sender", func() bool {
		var waiting, senders int
		err := env.Pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
				WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = current_database()),
			(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walsender' AND datname = current_database())`).Scan(&waiting, &senders)
		return err == nil && waiting == 1 && senders == 0
	})
	if _, err := other.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, lockKey(cfg.Slot)); err != nil {
		t.Fatal(err)
	}
	if r := <-taken; r.err != nil || r.action != checkpoint.Bootstrap {
		t.Fatalf("after the wait: %s, %v; want bootstrap", r.action, r.err)
	}
}
