package retention_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/progress"
	"github.com/outbox-relay/outbox-relay/retention"
)

// A transaction that inserted a month-old row and commits late: its row
// is older than the retention, yet the slot has not passed its commit.
// cleanup must keep it until the relay has confirmed it, whatever the
// row's age and however far the slot has confirmed other rows. While it
// runs, it holds back the rows inserted after it began too (the way it
// holds back VACUUM); rows from before it go.
func TestLateCommitKeptUntilConfirmed(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	stop := startRelay(t, env)
	ctx := context.Background()
	old := time.Now().Add(-30 * 24 * time.Hour)
	var before, after []string
	for i := range 3 {
		before = append(before, insertAt(t, env, old, fmt.Sprintf("before-%d", i)))
	}

	// The long transaction: begun, its row inserted, not committed.
	long, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Rollback(ctx)
	var late string
	if err := long.QueryRow(ctx, `INSERT INTO `+env.Table.Quoted()+` (aggregate_type, aggregate_id, event_type, payload, created_at)
		VALUES ('order', 'late', 'created', '{}', $1) RETURNING id::text`, old).Scan(&late); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		after = append(after, insertAt(t, env, old, fmt.Sprintf("after-%d", i)))
	}
	recent := insertAt(t, env, time.Now(), "recent")
	env.WaitSlotCaughtUp(time.Minute)

	rep := cleanup(t, env, nil)
	ids, _ := rowIDs(t, env)
	if rep.Deleted != int64(len(before)) || len(ids) != len(after)+1 {
		t.Fatalf("first run deleted %d rows, table holds %v; want the %d rows older than the open transaction deleted, the %d after it and the recent one kept (report %+v)",
			rep.Deleted, ids, len(before), len(after), rep)
	}

	// The relay stops; the long transaction commits: its row is committed,
	// a month old, and not confirmed by the slot.
	stop()
	if err := long.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rep = cleanup(t, env, func(c *retention.Config) { c.Wait = time.Second })
	ids, processed := rowIDs(t, env)
	if !has(ids, late) {
		t.Fatalf("cleanup deleted the late-committed row %s before the slot confirmed it (report %+v)", late, rep)
	}
	if processed[late] {
		t.Errorf("cleanup marked the late-committed row %s processed before the slot confirmed it", late)
	}

	// Once the relay has published and confirmed it, it goes.
	startRelay(t, env)
	rep = cleanup(t, env, nil)
	ids, processed = rowIDs(t, env)
	if len(ids) != 1 || ids[0] != recent || !processed[recent] {
		t.Errorf("after confirmation: table holds %v (processed %v), want the recent row %s only, processed (report %+v)", ids, processed, recent, rep)
	}
	stored := streamIDs(t, env)
	for _, id := range append(append(before, after...), late, recent) {
		if !has(stored, id) {
			t.Errorf("event %s deleted from the table but not in the stream", id)
		}
	}
}

// Dead letters not yet retried stay (dlq retry reads them from the
// table), whatever their age; once retried they go like any row. A dry
// run counts and changes nothing.
func TestDeadLettersKeptAndDryRun(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	startRelay(t, env)
	old := time.Now().Add(-30 * 24 * time.Hour)
	dead := insertAt(t, env, old, "dead")
	plain := insertAt(t, env, old, "plain")
	env.WaitSlotCaughtUp(time.Minute)
	// The record the relay writes for a dead letter (see
	// checkpoint.Store.RecordDeadLetter), for a row it published.
	if err := checkpoint.NewStore(env.Pool, env.Table.Schema, env.Slot).RecordDeadLetter(context.Background(), dead, "test", 0); err != nil {
		t.Fatal(err)
	}

	dry := cleanup(t, env, func(c *retention.Config) { c.DryRun = true })
	if dry.Deleted != 1 || dry.DeadLetters != 1 || dry.Unconfirmed != 0 {
		t.Errorf("dry run: would delete %d, keep %d dead letters and %d unconfirmed; want 1, 1, 0", dry.Deleted, dry.DeadLetters, dry.Unconfirmed)
	}
	if ids, _ := rowIDs(t, env); len(ids) != 2 {
		t.Fatalf("the dry run changed the table: %v", ids)
	}

	rep := cleanup(t, env, nil)
	ids, processed := rowIDs(t, env)
	if len(ids) != 1 || ids[0] != dead || processed[dead] || rep.DeadLetters != 1 {
		t.Fatalf("table holds %v (processed %v), want only the dead letter %s, unmarked (report %+v); %s deleted", ids, processed, dead, rep, plain)
	}

	env.Exec(`UPDATE `+checkpoint.DeadLettersTable+` SET retried_at = now() WHERE event_id = $1`, dead)
	cleanup(t, env, nil)
	if ids, _ := rowIDs(t, env); len(ids) != 0 {
		t.Errorf("the retried dead letter was kept: %v", ids)
	}
}

// Without a mark the slot has passed, nothing is deleted.
func TestNothingBeforeTheSlotPassesAMark(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	stop := startRelay(t, env)
	env.WaitSlotCaughtUp(time.Minute)
	stop()
	id := insertAt(t, env, time.Now().Add(-30*24*time.Hour), "x")
	rep := cleanup(t, env, func(c *retention.Config) { c.Wait = 0 })
	if rep.HasMark {
		t.Errorf("the stopped slot passed a mark taken after it stopped: %+v", rep)
	}
	if ids, _ := rowIDs(t, env); !has(ids, id) {
		t.Errorf("row %s deleted without any confirmation", id)
	}
}

// With the polling source, processed_at alone says what is published: no
// slot is read, rows without it stay, dead letters stay.
func TestProcessedOnly(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	old := time.Now().Add(-30 * 24 * time.Hour)
	published, pending, dead := insertAt(t, env, old, "p"), insertAt(t, env, old, "q"), insertAt(t, env, old, "d")
	env.Exec(`UPDATE `+env.Table.Quoted()+` SET processed_at = now() WHERE id = ANY($1::uuid[])`, []string{published, dead})
	if err := checkpoint.NewStore(env.Pool, env.Table.Schema, "").RecordDeadLetter(context.Background(), dead, "test", 0); err != nil {
		t.Fatal(err)
	}
	rep := cleanup(t, env, func(c *retention.Config) { c.ProcessedOnly = true; c.Slot = "" })
	ids, _ := rowIDs(t, env)
	if rep.Deleted != 1 || has(ids, published) || !has(ids, pending) || !has(ids, dead) {
		t.Errorf("deleted %d, table holds %v: want only %s deleted (report %+v)", rep.Deleted, ids, published, rep)
	}
}

// Progress, when set, is shown the rows deleted: a bar, without a
// total, ended by a newline.
func TestCleanupProgress(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	old := time.Now().Add(-30 * 24 * time.Hour)
	var ids []string
	for i := range 5 {
		ids = append(ids, insertAt(t, env, old, fmt.Sprintf("p-%d", i)))
	}
	env.Exec(`UPDATE `+env.Table.Quoted()+` SET processed_at = now() WHERE id = ANY($1::uuid[])`, ids)
	var buf bytes.Buffer
	rep := cleanup(t, env, func(c *retention.Config) {
		c.ProcessedOnly, c.Slot, c.Progress = true, "", progress.NewBar(&buf)
	})
	out := buf.String()
	if rep.Deleted != 5 || !strings.HasPrefix(out, "\rdeleting 5 rows") || !strings.HasSuffix(out, "\n") || strings.Contains(out, "%") {
		t.Errorf("deleted %d, bar %q: want 5 rows deleted shown without a total", rep.Deleted, out)
	}
}

// The grants docs/cleanup.md gives a cleanup role are enough to delete and
// mark; the role has nothing else.
func TestCleanupRoleGrants(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	startRelay(t, env)
	role := "cleanup_" + env.Database
	t.Cleanup(func() {
		_, _ = env.Pool.Exec(context.Background(), `DROP OWNED BY `+role)
		_, _ = env.Pool.Exec(context.Background(), `DROP ROLE IF EXISTS `+role)
	})
	for _, stmt := range []string{
		`CREATE ROLE ` + role + ` LOGIN`,
		`GRANT USAGE ON SCHEMA public TO ` + role,
		`GRANT SELECT, DELETE, UPDATE (processed_at) ON public.outbox_events TO ` + role,
		`GRANT SELECT ON public.outbox_relay_slots, public.outbox_relay_dead_letters TO ` + role,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON public.outbox_relay_cleanup_marks TO ` + role,
	} {
		env.Exec(stmt)
	}
	old := insertAt(t, env, time.Now().Add(-30*24*time.Hour), "old")
	recent := insertAt(t, env, time.Now(), "recent")
	env.WaitSlotCaughtUp(time.Minute)

	pool := env.OpenPoolWith(func(cfg *pgxpool.Config) { cfg.ConnConfig.User = role })
	rep, err := retention.Run(context.Background(), pool, retention.Config{Table: env.Table, Slot: env.Slot, Retention: 7 * 24 * time.Hour,
		Batch: 10, Wait: 30 * time.Second, MarkProcessed: true}, zerolog.Nop())
	if err != nil {
		t.Fatalf("cleanup as %s: %v", role, err)
	}
	ids, processed := rowIDs(t, env)
	if rep.Deleted != 1 || has(ids, old) || !processed[recent] {
		t.Errorf("as %s: deleted %d, table %v, processed %v; want %s deleted and %s marked", role, rep.Deleted, ids, processed, old, recent)
	}
}
