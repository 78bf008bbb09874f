package poll

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// pollSetup reads what `migrate --source poll` adds: whether seq has a
// default and whether the pending index exists (and is valid).
func pollSetup(t *testing.T, env *relaytest.Env) (seqDefault, index bool) {
	t.Helper()
	err := env.Pool.QueryRow(context.Background(), `SELECT
		EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'outbox_events'
			AND column_name = 'seq' AND column_default IS NOT NULL),
		EXISTS (SELECT 1 FROM pg_index WHERE indrelid = 'outbox_events'::regclass AND indisvalid
			AND indexrelid::regclass::text = 'idx_outbox_pending_aggregate')`).Scan(&seqDefault, &index)
	if err != nil {
		t.Fatal(err)
	}
	return seqDefault, index
}

// TestPollNeedsMigrateSourcePoll: a plain migrate leaves the table as WAL
// mode wants it (no seq default, no pending index: nothing an insert pays
// for polling), and run --source poll refuses it with the fix. After
// migrate --source poll --relay-role (run twice: it is idempotent) the
// table has both, and the polling relay runs as the role, with nothing but
// what migrate granted it.
func TestPollNeedsMigrateSourcePoll(t *testing.T) {
	env := suite.NewEnv(t) // migrated the plain way
	if seq, index := pollSetup(t, env); seq || index {
		t.Fatalf("after a plain migrate: seq default %v, pending index %v; want neither", seq, index)
	}
	refused := suite.StartRelay(t, env, relaytest.PollArgs...)
	if code := refused.Wait(relaytest.FaultWait); code != 1 {
		t.Fatalf("polling relay on a plain-migrated table exited %d, want 1; log:\n%s", code, refused.Logs())
	}
	if logs := refused.Logs(); !strings.Contains(logs, "outbox-relay migrate --source poll") || !strings.Contains(logs, "idx_outbox_pending_aggregate") {
		t.Errorf("the refusal does not name the missing index and the fix:\n%s", logs)
	}

	role := "pollrole_" + env.Database
	t.Cleanup(func() {
		_, _ = env.Pool.Exec(context.Background(), `DROP OWNED BY `+role)
		_, _ = env.Pool.Exec(context.Background(), `DROP ROLE `+role)
	})
	for i := 0; i < 2; i++ {
		if out, err := suite.Relay.RunCLI(t, "migrate", "--pg-url", env.PGURL, "--source", "poll", "--relay-role", role); err != nil {
			t.Fatalf("migrate --source poll --relay-role, run %d (%v):\n%s", i+1, err, out)
		}
	}
	if seq, index := pollSetup(t, env); !seq || !index {
		t.Fatalf("after migrate --source poll: seq default %v, pending index %v; want both", seq, index)
	}
	var replication bool
	if err := env.Pool.QueryRow(context.Background(), `SELECT rolreplication FROM pg_roles WHERE rolname = $1`, role).Scan(&replication); err != nil {
		t.Fatal(err)
	}
	if replication {
		t.Errorf("the polling role has REPLICATION, which polling does not need")
	}
	env.RelayPG = strings.Replace(env.PGURL, "postgres://postgres@", "postgres://"+role+"@", 1)
	if env.RelayPG == env.PGURL {
		t.Fatalf("cannot put the role in %s", env.PGURL)
	}
	ids := env.Tx(relaytest.NewRow("order", "1", "created", `{}`), relaytest.NewRow("order", "1", "paid", `{}`))
	relay := suite.StartRelay(t, env, relaytest.PollArgs...)
	relay.WaitLog(relaytest.LogPolling, relaytest.FaultWait)
	for deadline := time.Now().Add(relaytest.FaultWait); relaytest.PendingRows(t, env) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) || relay.Exited() {
			t.Fatalf("rows still pending as %s; log:\n%s", role, relay.Logs())
		}
	}
	env.WaitStored(len(ids), 30*time.Second)
	relay.Drain(30 * time.Second)
	env.CheckWith(relaytest.Expect{Polled: true})
}
