package retention_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/retention"
)

// partitionedDDL is the outbox table partitioned by created_at, as
// docs/cleanup.md shows it: the primary key includes the partition key.
const partitionedDDL = `CREATE TABLE part_events (
    id             UUID         NOT NULL DEFAULT gen_random_uuid(),
    aggregate_type VARCHAR(100) NOT NULL,
    aggregate_id   VARCHAR(100) NOT NULL,
    event_type     VARCHAR(100) NOT NULL,
    payload        JSONB        NOT NULL,
    attempts       INT          NOT NULL DEFAULT 0,
    created_at     TIMESTAMPTZ  NOT NULL DEFAULT NOW(),
    processed_at   TIMESTAMPTZ,
    PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at)`

// A partitioned outbox table: the migrations publish it through its root,
// the relay streams the inserts of every partition as the table's, in
// commit order, and cleanup drops an old partition only once every row in
// it is confirmed.
func TestPartitionedTable(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Hour)
	split := now.Add(-20 * 24 * time.Hour)
	ts := func(t time.Time) string { return "'" + t.Format(time.RFC3339) + "'" }
	env.Exec(partitionedDDL)
	env.Exec(`CREATE TABLE part_events_old PARTITION OF part_events FOR VALUES FROM (` + ts(now.Add(-60*24*time.Hour)) + `) TO (` + ts(split) + `)`)
	env.Exec(`CREATE TABLE part_events_new PARTITION OF part_events FOR VALUES FROM (` + ts(split) + `) TO (` + ts(now.Add(30*24*time.Hour)) + `)`)
	env.Table = contract.Table{Schema: "public", Name: "part_events"}
	env.Pub = "part_pub"
	env.Migrate()

	var viaRoot bool
	if err := env.Pool.QueryRow(ctx, `SELECT pubviaroot FROM pg_publication WHERE pubname = 'part_pub'`).Scan(&viaRoot); err != nil || !viaRoot {
		t.Fatalf("migrate created the publication of a partitioned table without publish_via_partition_root (%v)", err)
	}
	// Without publish_via_partition_root the relay would see only the
	// partitions' names: refused, with the fix.
	env.Exec(`ALTER PUBLICATION part_pub SET (publish_via_partition_root = false)`)
	err := replication.Check(ctx, env.Pool, env.Table, env.Pub)
	if err == nil || !strings.Contains(err.Error(), "publish_via_partition_root = true") {
		t.Errorf("check of a partitioned table published through its partitions: %v, want the publish_via_partition_root fix", err)
	}
	env.Exec(`ALTER PUBLICATION part_pub SET (publish_via_partition_root = true)`)

	stop := startRelay(t, env)
	oldAt, newAt := now.Add(-30*24*time.Hour), now
	var want []string
	for i, at := range []time.Time{newAt, oldAt, newAt, oldAt} {
		want = append(want, insertAt(t, env, at.Add(time.Duration(i)*time.Minute), "a"))
	}
	env.WaitSlotCaughtUp(time.Minute)
	if got := streamIDs(t, env); !slices.Equal(got, want) {
		t.Fatalf("stream holds %v, want the events of both partitions in commit order %v", got, want)
	}

	// A run while the relay confirms: the old partition's rows go, row by
	// row (partitions are not dropped in this run).
	rep := cleanup(t, env, nil)
	if rep.Deleted != 2 {
		t.Fatalf("deleted %d rows, want the old partition's two (report %+v)", rep.Deleted, rep)
	}

	// An old-partition row the relay has not confirmed: the partition stays.
	stop()
	unconfirmed := insertAt(t, env, oldAt.Add(time.Hour), "b")
	want = append(want, unconfirmed)
	dropAll := func(c *retention.Config) { c.DropPartitions = true; c.Wait = time.Second }
	rep = cleanup(t, env, dropAll)
	if !rep.HasMark || len(rep.Dropped) != 0 || !tableExists(t, env.Pool, "part_events_old") {
		t.Fatalf("partition dropped before its row %s was confirmed (report %+v)", unconfirmed, rep)
	}
	if ids, _ := rowIDs(t, env); !has(ids, unconfirmed) {
		t.Fatalf("unconfirmed row %s deleted", unconfirmed)
	}

	startRelay(t, env)
	// A writer still inserting into the old partition (a transaction that
	// began long ago): the drop waits for it no longer than the lock
	// timeout, and leaves the partition for the next run.
	writer, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Exec(ctx, `INSERT INTO part_events (aggregate_type, aggregate_id, event_type, payload, created_at)
		VALUES ('order', 'w', 'created', '{}', $1)`, oldAt); err != nil {
		t.Fatal(err)
	}
	rep = cleanup(t, env, func(c *retention.Config) { dropAll(c); c.LockTimeout = 300 * time.Millisecond })
	if !slices.Equal(rep.Busy, []string{"part_events_old"}) || !tableExists(t, env.Pool, "part_events_old") {
		t.Fatalf("with a writer in the old partition: dropped %v, busy %v; want it busy and kept", rep.Dropped, rep.Busy)
	}
	if err := writer.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	rep = cleanup(t, env, dropAll)
	if !slices.Equal(rep.Dropped, []string{"part_events_old"}) || tableExists(t, env.Pool, "part_events_old") {
		t.Fatalf("dropped %v after confirmation, want part_events_old (report %+v)", rep.Dropped, rep)
	}
	if !tableExists(t, env.Pool, "part_events_new") {
		t.Error("the current partition was dropped")
	}
	ids, _ := rowIDs(t, env)
	if !slices.Equal(sorted(ids), sorted([]string{want[0], want[2]})) {
		t.Errorf("table holds %v, want the current partition's rows %v", ids, []string{want[0], want[2]})
	}
	if got := streamIDs(t, env); !slices.Equal(got, want) {
		t.Errorf("stream holds %v, want %v", got, want)
	}
}

func tableExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`, pgx.Identifier{name}.Sanitize()).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func sorted(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}
