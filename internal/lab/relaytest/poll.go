package relaytest

import (
	"context"
	"testing"
)

// PollArgs run the relay in polling mode with batches small enough that
// a kill lands in the middle of several.
var PollArgs = []string{"--source", "poll", "--poll-batch", "200", "--poll-interval", "100ms", "--ack-timeout", "2s"}

// LogPolling is the polling relay's start-up line.
const LogPolling = "starting outbox relay, polling the table"

// PollEnv is env (from NewEnv) set up for polling, as a user does it:
// migrate, then migrate --source poll.
func (s *Suite) PollEnv(t testing.TB, env *Env) *Env {
	t.Helper()
	if out, err := s.Relay.RunCLI(t, "migrate", "--pg-url", env.PGURL, "--table", env.Table.String(), "--publication", env.Pub, "--source", "poll"); err != nil {
		t.Fatalf("migrate --source poll (%v):\n%s", err, out)
	}
	return env
}

// PendingRows counts the rows without processed_at.
func PendingRows(t testing.TB, env *Env) int {
	t.Helper()
	var n int
	if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_events WHERE processed_at IS NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
