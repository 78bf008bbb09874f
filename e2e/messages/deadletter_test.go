package messages

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// TestDeadLetterRecordedAfterCrash: a row whose id a Nats-Msg-Id cannot
// carry (a space in it) goes to the dead-letter subject; the relay is
// SIGKILLed once JetStream stored the dead letter and while its Postgres
// record waits (the record table locked meanwhile). The next relay finds
// the dead letter in the stream beyond the slot's position, skips the
// event and records the dead letter as the first relay would have: under
// the row's id, so `dlq list` shows the row, the dead-letter view holds it
// and `dlq retry --id` finds it. Before the fix the record named the
// event's position (LSN#index): `dlq list` showed "(row gone)".
func TestDeadLetterRecordedAfterCrash(t *testing.T) {
	env := suite.NewEnv(t)
	env.Exec(`DROP VIEW outbox_dead_letters`)
	env.Exec(`ALTER TABLE outbox_events ALTER COLUMN id TYPE text`)
	env.Exec(`CREATE VIEW outbox_dead_letters AS SELECT e.*, d.reason AS dead_letter_reason, d.dead_lettered_at
		FROM outbox_events e JOIN outbox_relay_dead_letters d ON d.event_id = e.id::text
		WHERE d.retried_at IS NULL ORDER BY d.dead_lettered_at`)
	relay := suite.StartRelay(t, env)
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
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
	const id = "order 42"
	env.Exec(`INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, 'order', '42', 'created', '{}')`, id)
	relaytest.WaitFor(t, relaytest.FaultWait, "the dead letter stored", func() bool { return len(deadLetters(t, env)) == 1 })
	var recording int32
	relaytest.WaitFor(t, relaytest.FaultWait, "the relay waiting to record the dead letter", func() bool {
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
	var records int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_relay_dead_letters`).Scan(&records); err != nil || records != 0 {
		t.Fatalf("%d dead-letter records (%v) after the crash, want none: the test did not crash between the PubAck and the record", records, err)
	}

	again := suite.StartRelay(t, env)
	again.WaitLog(relaytest.LogSkipStored, relaytest.FaultWait)
	env.WaitSlotCaughtUp(relaytest.FaultWait)
	again.Drain(30 * time.Second)

	if n := len(deadLetters(t, env)); n != 1 {
		t.Errorf("%d dead letters stored, want 1: the restart published it again", n)
	}
	rows, err := env.Pool.Query(ctx, `SELECT event_id FROM outbox_relay_dead_letters`)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(keys) != 1 || keys[0] != id {
		t.Errorf("dead-letter records %q (%v), want one, under the row's id %q", keys, err, id)
	}
	var inView int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_dead_letters WHERE id = $1`, id).Scan(&inView); err != nil || inView != 1 {
		t.Errorf("the dead-letter view shows the row %d times (%v), want once", inView, err)
	}
	out, err := suite.Relay.RunCLI(t, "dlq", "list", "--json", "--pg-url", env.PGURL)
	if err != nil {
		t.Fatalf("dlq list: %v\n%s", err, out)
	}
	var list []struct {
		EventID       string  `json:"event_id"`
		AggregateType *string `json:"aggregate_type"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 1 || list[0].EventID != id || list[0].AggregateType == nil {
		t.Errorf("dlq list (%v): want the row %q with its aggregate; got:\n%s", err, id, out)
	}
	retry := append([]string{"dlq", "retry", "--id", id}, env.ToolArgs()...)
	if out, err := suite.Relay.RunCLI(t, retry...); err == nil || !strings.Contains(out, "still cannot be published") {
		t.Errorf("dlq retry --id %q of a row that still cannot be published (%v):\n%s", id, err, out)
	}
}

// deadLetters returns the messages on the dead-letter subject.
func deadLetters(t *testing.T, env *relaytest.Env) []string {
	t.Helper()
	var ids []string
	for _, m := range relaytest.StreamInOrder(t, env) {
		if m.Subject == env.DeadSubj {
			ids = append(ids, m.Header.Get(contract.HeaderMsgID))
		}
	}
	return ids
}
