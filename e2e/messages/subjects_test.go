package messages

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// TestDottedSubjects: with --subject-dots tokens, order.created is
// published on outbox.order.order.created, a consumer filtering
// outbox.order.> receives it, and a relay killed with dotted-subject
// publishes in flight restarts without storing any event twice (the
// start-up and tail reads use the outbox.*.> filter).
func TestDottedSubjects(t *testing.T) {
	env := suite.NewEnv(t)
	env.SubjectDots = "tokens"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	relay := suite.StartRelay(t, env)
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)

	stream := env.StreamHandle(10 * time.Second)
	if got := stream.CachedInfo().Config.Subjects; len(got) == 0 || got[0] != "outbox.*.>" {
		t.Fatalf("stream subjects %v, want outbox.*.> first", got)
	}
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "orders", FilterSubject: "outbox.order.>"})
	if err != nil {
		t.Fatal(err)
	}
	ids := env.Tx(relaytest.NewRow("order", "1", "order.created", `{}`), relaytest.NewRow("invoice", "1", "invoice.created", `{}`))
	batch, err := cons.Fetch(2, jetstream.FetchMaxWait(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []jetstream.Msg
	for m := range batch.Messages() {
		got = append(got, m)
	}
	if len(got) != 1 || got[0].Subject() != "outbox.order.order.created" || got[0].Headers().Get(contract.HeaderMsgID) != ids[0] {
		t.Fatalf("consumer on outbox.order.> got %d messages, want the order.created event", len(got))
	}

	// Dotted subjects in flight when the relay dies.
	rows, err := env.Pool.Query(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', 'o' || (i % 20), 'order.line.' || (i % 3), jsonb_build_object('n', i) FROM generate_series(1, 1500) AS i
		RETURNING id::text`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed with %d publishes in flight", relay.WaitInFlight(relaytest.FaultWait))
	relay.Kill()
	relay = suite.StartRelay(t, env)
	relaytest.Settle(t, env, relay, nil, relaytest.Expect{})
}
