package poll

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// TestPollSetupRebuildsInvalidIndex: a CREATE INDEX CONCURRENTLY that
// failed leaves an invalid index under the pending index's name; the
// polling relay's check says so, and InstallPoll (migrate --source poll)
// run again drops and rebuilds it.
func TestPollSetupRebuildsInvalidIndex(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	ctx := context.Background()
	names := migrations.Names{Table: env.Table, Publication: env.Pub}
	env.Tx(relaytest.NewRow("order", "1", "created", `{}`), relaytest.NewRow("order", "1", "paid", `{}`))
	// A unique index over duplicates fails after it is in the catalog.
	if _, err := env.Pool.Exec(ctx, `CREATE UNIQUE INDEX CONCURRENTLY idx_outbox_pending_aggregate ON outbox_events (aggregate_type)`); err == nil {
		t.Fatal("the failing index build succeeded")
	}
	state, err := migrations.ReadPollState(ctx, env.Pool, names)
	if err != nil {
		t.Fatal(err)
	}
	if p := state.Problem(names); !state.Index || state.Valid || !strings.Contains(p, "invalid") || !strings.Contains(p, migrations.PollFix) {
		t.Fatalf("after a failed build: %+v, problem %q; want an invalid index and the fix", state, p)
	}
	conn, err := pgx.ParseConfig(env.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrations.InstallPoll(ctx, conn, names); err != nil {
		t.Fatal(err)
	}
	if state, err = migrations.ReadPollState(ctx, env.Pool, names); err != nil {
		t.Fatal(err)
	}
	if p := state.Problem(names); p != "" {
		t.Fatalf("after InstallPoll: %+v, problem %q", state, p)
	}
	var unique bool
	if err := env.Pool.QueryRow(ctx, `SELECT indisunique FROM pg_index WHERE indexrelid = $1::regclass`, names.PendingIndex()).Scan(&unique); err != nil {
		t.Fatal(err)
	}
	if unique {
		t.Error("the invalid index was kept, not rebuilt")
	}
}
