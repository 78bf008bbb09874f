package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// TestCleanupKeepsDeadLetters: with the relay running, `cleanup` deletes
// the confirmed rows and keeps a real dead letter (a NULL payload), so
// that `dlq retry` can still publish it from its row once fixed; after
// the retry the next cleanup deletes it. --dry-run prints the counts and
// deletes nothing.
func TestCleanupKeepsDeadLetters(t *testing.T) {
	env := suite.NewEnv(t)
	env.Exec(`ALTER TABLE outbox_events ALTER COLUMN payload DROP NOT NULL`)
	relay := suite.StartRelay(t, env)
	relay.WaitLog("streaming from the slot", 30*time.Second)
	plain := env.Tx(relaytest.NewRow("order", "1", "a", `{}`), relaytest.NewRow("order", "1", "b", `{}`))
	var dead string
	if err := env.Pool.QueryRow(context.Background(), `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', '1', 'null.payload', NULL) RETURNING id::text`).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	env.WaitStored(3, 30*time.Second)
	env.WaitSlotCaughtUp(time.Minute)

	args := append([]string{"cleanup", "--retention", "0s", "--wait", "1m"}, "--pg-url", env.PGURL, "--slot", env.Slot, "--table", env.Table.String(), "--log-format", "json")
	out, err := suite.Relay.RunCLI(t, append(args, "--dry-run")...)
	if err != nil || !strings.Contains(out, "would delete: 2 rows") || !strings.Contains(out, "kept: 1 dead letters") {
		t.Fatalf("cleanup --dry-run (%v):\n%s", err, out)
	}
	if n := countRows(t, env); n != 3 {
		t.Fatalf("the dry run left %d rows, want 3", n)
	}
	if out, err = suite.Relay.RunCLI(t, args...); err != nil || !strings.Contains(out, "deleted: 2 rows") {
		t.Fatalf("cleanup (%v):\n%s", err, out)
	}
	if n := countRows(t, env); n != 1 {
		t.Fatalf("cleanup left %d rows, want the dead letter only (deleted %v)", n, plain)
	}

	env.Exec(`UPDATE outbox_events SET payload = '{"fixed": true}' WHERE id = $1`, dead)
	retry := append([]string{"dlq", "retry", "--id", dead}, env.ToolArgs()...)
	if out, err := suite.Relay.RunCLI(t, retry...); err != nil {
		t.Fatalf("dlq retry after cleanup: %v\n%s", err, out)
	}
	if out, err = suite.Relay.RunCLI(t, args...); err != nil || !strings.Contains(out, "deleted: 1 rows") {
		t.Fatalf("cleanup after the retry (%v):\n%s", err, out)
	}
}

func countRows(t *testing.T, env *relaytest.Env) int {
	t.Helper()
	var n int
	if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_events`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
