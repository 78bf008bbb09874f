package poll

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// TestPollDeadLettersWithoutIDs: rows without an id (a table whose id
// may be NULL) are dead-lettered by the polling relay, each in a batch of
// its own, at the same position of its batch (index 0). Each must be
// stored (none dropped by JetStream as a duplicate of the one before) and
// recorded under a key of its own. Before the fix the dead letters shared
// the Nats-Msg-Id dead-letter:0/0#0 (JetStream kept the first only) and
// the record key 0/0#0 (one record for all three).
func TestPollDeadLettersWithoutIDs(t *testing.T) {
	env := suite.PollEnv(t, suite.NewEnv(t))
	env.Exec(`ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_pkey, ALTER COLUMN id DROP NOT NULL`)
	relay := suite.StartRelay(t, env, "--source", "poll", "--poll-batch", "1", "--poll-interval", "100ms", "--poll-max-attempts", "1")
	relay.WaitLog(relaytest.LogPolling, relaytest.FaultWait)
	for _, agg := range []string{"1", "2", "3"} {
		env.Exec(`INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload) VALUES (NULL, 'order', $1, 'created', '{}')`, agg)
	}
	relaytest.WaitFor(t, relaytest.FaultWait, "every row settled", func() bool { return relaytest.PendingRows(t, env) == 0 })
	relay.Drain(30 * time.Second)

	dead := deadLetterIDs(t, env)
	slices.Sort(dead)
	if len(dead) != 3 || len(slices.Compact(slices.Clone(dead))) != 3 {
		t.Errorf("dead letters stored: %q; want 3, under 3 different ids", dead)
	}
	keys := deadLetterRecords(t, env)
	if len(keys) != 3 || len(slices.Compact(slices.Clone(keys))) != 3 {
		t.Errorf("dead-letter records %q; want 3, under 3 different keys", keys)
	}
	for _, k := range keys {
		if !slices.Contains(dead, contract.DeadLetterMsgID(k)) {
			t.Errorf("dead-letter record %q names no stored dead letter (%q)", k, dead)
		}
	}
}

// TestPollDeadLetterRecordedAfterCrash: the polling relay dead-letters
// two rows, one too large for the stream and one whose id a Nats-Msg-Id
// cannot carry (a space in it); it is SIGKILLed once JetStream stored both
// dead letters and while their Postgres records wait (the record table
// locked meanwhile). The next relay's claim check finds both in the
// stream: it settles the rows without publishing them again and records
// them as the first relay would have, under the rows' ids, so `dlq list`
// shows them. Before the fix the rows were settled and never recorded.
func TestPollDeadLetterRecordedAfterCrash(t *testing.T) {
	env := suite.PollEnv(t, suite.NewEnv(t))
	env.Exec(`DROP VIEW outbox_dead_letters`)
	env.Exec(`ALTER TABLE outbox_events ALTER COLUMN id TYPE text`)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := env.JS.CreateStream(ctx, jetstream.StreamConfig{Name: env.Stream, Subjects: []string{"outbox.>", env.DeadSubj},
		Storage: jetstream.FileStorage, MaxMsgSize: 2048, Duplicates: time.Second}); err != nil {
		t.Fatal(err)
	}
	args := []string{"--source", "poll", "--poll-interval", "100ms", "--poll-max-attempts", "1"}
	relay := suite.StartRelay(t, env, args...)
	relay.WaitLog(relaytest.LogPolling, relaytest.FaultWait)

	lock, err := pgx.Connect(ctx, env.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close(context.WithoutCancel(ctx))
	tx, err := lock.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE outbox_relay_dead_letters IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	const spaced = "order 42"
	tooBig := env.Tx(relaytest.NewRow("order", "1", "too.big", `{"blob": "`+strings.Repeat("x", 3000)+`"}`))[0]
	env.Exec(`INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, 'order', '2', 'created', '{}')`, spaced)
	relaytest.WaitFor(t, relaytest.FaultWait, "both dead letters stored", func() bool { return len(deadLetterIDs(t, env)) == 2 })
	var recording int32
	relaytest.WaitFor(t, relaytest.FaultWait, "the relay waiting to record a dead letter", func() bool {
		err := env.Pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO %outbox_relay_dead_letters%'`).Scan(&recording)
		return err == nil
	})
	relay.Kill()
	// The killed relay's backend would insert the record once the lock
	// goes: it ends with its client.
	env.Exec(`SELECT pg_terminate_backend($1)`, recording)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := deadLetterRecords(t, env); len(n) != 0 {
		t.Fatalf("dead-letter records %q after the crash, want none: the test did not crash between the PubAck and the record", n)
	}

	again := suite.StartRelay(t, env, args...)
	relaytest.WaitFor(t, relaytest.FaultWait, "every row settled", func() bool { return relaytest.PendingRows(t, env) == 0 })
	again.Drain(30 * time.Second)
	requireClaimFound(t, again)
	if dead := deadLetterIDs(t, env); len(dead) != 2 {
		t.Errorf("dead letters stored: %q; want the 2 of the first relay, not published again", dead)
	}
	keys := deadLetterRecords(t, env)
	want := []string{spaced, tooBig}
	if slices.Sort(want); !slices.Equal(keys, want) {
		t.Errorf("dead-letter records %q, want %q: the rows' ids", keys, want)
	}
	out, err := suite.Relay.RunCLI(t, "dlq", "list", "--pg-url", env.PGURL)
	if err != nil || !strings.Contains(out, tooBig) || !strings.Contains(out, `"order 42"`) || strings.Contains(out, "(row gone)") {
		t.Errorf("dlq list (%v): want both rows:\n%s", err, out)
	}
}

// deadLetterIDs returns the Nats-Msg-Ids of the messages on the
// dead-letter subject.
func deadLetterIDs(t *testing.T, env *relaytest.Env) []string {
	t.Helper()
	var ids []string
	for _, m := range relaytest.StreamInOrder(t, env) {
		if m.Subject == env.DeadSubj {
			ids = append(ids, m.Header.Get(contract.HeaderMsgID))
		}
	}
	return ids
}

// deadLetterRecords returns the keys of the dead-letter records, sorted.
func deadLetterRecords(t *testing.T, env *relaytest.Env) []string {
	t.Helper()
	rows, err := env.Pool.Query(context.Background(), `SELECT event_id FROM outbox_relay_dead_letters ORDER BY event_id`)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return keys
}
