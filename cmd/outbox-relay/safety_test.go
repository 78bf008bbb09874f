package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// runCLIEnv runs one outbox-relay command to completion with extra
// environment variables.
func runCLIEnv(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(suite.Relay.Path, args...)
	cmd.Env = append(append(cmd.Environ(), suite.Relay.Env...), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// bystander is a real database and NATS server that a tool was not asked
// to use, exported in the environment as a relay's would be, and a
// snapshot of what they hold.
type bystander struct {
	env     *relaytest.Env
	tables  int64
	vars    []string
	streams []string
}

func newBystander(t *testing.T) *bystander {
	b := &bystander{env: suite.NewEnv(t)}
	b.tables = b.count(t, `SELECT count(*) FROM pg_class WHERE relkind IN ('r', 'p') AND relnamespace::regnamespace::text NOT IN ('pg_catalog', 'information_schema')`)
	b.streams = b.streamNames(t)
	b.vars = []string{"OUTBOX_PG_URL=" + b.env.PGURL, "OUTBOX_NATS_URL=" + b.env.NATSURL}
	return b
}

func (b *bystander) count(t *testing.T, sql string) int64 {
	t.Helper()
	var n int64
	if err := b.env.Pool.QueryRow(t.Context(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (b *bystander) streamNames(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var names []string
	l := b.env.JS.StreamNames(ctx)
	for n := range l.Name() {
		names = append(names, n)
	}
	if err := l.Err(); err != nil && err != jetstream.ErrEndOfData {
		t.Fatal(err)
	}
	return names
}

// requireUntouched fails when anything was written to the bystander: a
// table created, an outbox row, a slot on its database, a stream.
func (b *bystander) requireUntouched(t *testing.T, tool string) {
	t.Helper()
	if n := b.count(t, `SELECT count(*) FROM pg_class WHERE relkind IN ('r', 'p') AND relnamespace::regnamespace::text NOT IN ('pg_catalog', 'information_schema')`); n != b.tables {
		t.Errorf("%s created tables in the database of OUTBOX_PG_URL: %d, was %d", tool, n, b.tables)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox_events`); n != 0 {
		t.Errorf("%s wrote %d outbox rows into the database of OUTBOX_PG_URL", tool, n)
	}
	if n := b.count(t, `SELECT count(*) FROM pg_replication_slots WHERE database = current_database()`); n != 0 {
		t.Errorf("%s created %d replication slots in the database of OUTBOX_PG_URL", tool, n)
	}
	if now := b.streamNames(t); strings.Join(now, ",") != strings.Join(b.streams, ",") {
		t.Errorf("%s changed the streams of OUTBOX_NATS_URL: %v, were %v", tool, now, b.streams)
	}
}

// TestBenchRefusesExistingDB: bench --pg-url without --allow-existing-db
// refuses before touching the server.
func TestBenchRefusesExistingDB(t *testing.T) {
	t.Parallel()
	b := newBystander(t)
	out, err := suite.Relay.RunCLI(t, "bench", "--pg-url", b.env.PGURL, "--nats-url", b.env.NATSURL, "--events", "100", "--big", "0", "--cold", "0", "--baseline", "0")
	if err == nil || !strings.Contains(out, "--allow-existing-db") {
		t.Errorf("bench --pg-url without --allow-existing-db (%v):\n%s", err, out)
	}
	b.requireUntouched(t, "bench --pg-url without --allow-existing-db")
}
