package consumer

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// The crash tests run a consumer in a child process: this test binary,
// re-executed with CONSUMER_TEST_CHILD=1 (built with the same flags, -race
// included). The child's settings come in the environment variables below.
const (
	envChild       = "CONSUMER_TEST_CHILD"
	envPGURL       = "CONSUMER_TEST_PG_URL"
	envNATSURL     = "CONSUMER_TEST_NATS_URL"
	envStream      = "CONSUMER_TEST_STREAM"
	envDurable     = "CONSUMER_TEST_DURABLE"
	envKillCommits = "CONSUMER_TEST_KILL_AFTER_COMMIT" // SIGKILL itself right after this many commits
	envDriver      = "CONSUMER_TEST_DRIVER"            // the driver's name: pgx or database_sql
)

var server relaytest.Server

func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "1" {
		os.Exit(childMain())
	}
	relaytest.RunWithServer(m, &server)
}

// childMain consumes with the effects handler and kills itself with
// SIGKILL right after its n-th commit, before that message's ack.
func childMain() int {
	ctx := context.Background()
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "child:", err); return 2 }
	killAfter, _ := strconv.Atoi(os.Getenv(envKillCommits))
	var commits atomic.Int64
	afterCommit = func(m *Message) {
		if commits.Add(1) == int64(killAfter) {
			fmt.Fprintf(os.Stderr, "child: committed %s, killing myself before the ack\n", m.ID)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	d, err := driverNamed(os.Getenv(envDriver))
	if err != nil {
		return fail(err)
	}
	nc, err := nats.Connect(os.Getenv(envNATSURL))
	if err != nil {
		return fail(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(err)
	}
	cons, err := js.Consumer(ctx, os.Getenv(envStream), os.Getenv(envDurable))
	if err != nil {
		return fail(err)
	}
	c, closeDB, err := d.new(os.Getenv(envPGURL), cons, effectHandler("child", nil))
	if err != nil {
		return fail(err)
	}
	defer closeDB()
	if err := c.Run(ctx); err != nil {
		return fail(err)
	}
	return 0
}

// effectHandler records one effect per run in the effects table, in the
// handler's transaction; seen, if set, gets every event id it runs for.
func effectHandler(by string, seen chan<- string) testHandler {
	return func(ctx context.Context, tx testTx, m *Message) error {
		if seen != nil {
			seen <- m.ID
		}
		return tx.Exec(ctx, `INSERT INTO effects (event_id, handled_by) VALUES ($1, $2)`, m.ID, by)
	}
}
