package outbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// emitted reads the outbox events a pgoutput slot decodes from the
// messages written since it was created, with decode's own decoder.
func emitted(t *testing.T, env *relaytest.Env, slot, prefix string) []decode.Event {
	t.Helper()
	rows, err := env.Pool.Query(context.Background(), `SELECT data FROM pg_logical_slot_get_binary_changes($1, NULL, NULL,
		'proto_version', '1', 'publication_names', 'outbox_pub', 'messages', 'true')`, slot)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		t.Fatal(err)
	}
	d := decode.NewDecoder(contract.Table{Schema: "public", Name: "outbox_events"}, decode.WithMessagePrefix(prefix))
	var out []decode.Event
	for _, m := range msgs {
		got, err := d.Decode(m)
		if err != nil {
			t.Fatal(err)
		}
		if got.Kind == decode.KindEvent {
			out = append(out, got.Event)
		}
	}
	return out
}

func createSlot(t *testing.T, env *relaytest.Env) string {
	t.Helper()
	slot := "emit_" + env.Database
	if _, err := env.Pool.Exec(context.Background(), `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = env.Pool.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, slot) })
	return slot
}

// Emit and EmitSQL write each event as one transactional message with
// the envelope the relay decodes, in one statement, the ids in the order
// of the events; the prefix is the Writer's.
func TestEmit(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	ctx := context.Background()
	slot := createSlot(t, env)
	evs := events(7)
	evs[0].Payload = map[string]any{"i": 0, "note": `back\slash`}
	evs[1].Headers = map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	ids := commitBoth(t, env,
		func(tx pgx.Tx) ([]string, error) { return outbox.Emit(ctx, tx, evs[:4]...) },
		func(tx *sql.Tx) ([]string, error) { return outbox.EmitSQL(ctx, tx, evs[4:]...) })
	if len(ids) != len(evs) {
		t.Fatalf("%d ids for %d events", len(ids), len(evs))
	}
	other, err := outbox.NewWriter(outbox.WithMessagePrefix("elsewhere"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Emit(ctx, env.Pool, evs[0]); err != nil {
		t.Fatal(err)
	}

	// The sqlc query writes the same envelope.
	for _, q := range parseQueries(t, "queries.sql") {
		if q.name == "EmitOutboxEvent" {
			var id string
			if err := env.Pool.QueryRow(ctx, q.sql, evs[0].AggregateType, evs[0].AggregateID, evs[0].EventType, `{"i": 0, "note": "back\\slash"}`).Scan(&id); err != nil {
				t.Fatal(err)
			}
			evs = append(evs, evs[0])
			ids = append(ids, id)
		}
	}

	decoded := emitted(t, env, slot, contract.DefaultMessagePrefix)
	if len(decoded) != len(evs) {
		t.Fatalf("decoded %d events, want %d", len(decoded), len(evs))
	}
	for i, d := range decoded {
		ev := evs[i]
		var payload, want any
		_ = json.Unmarshal(d.Payload, &payload)
		b, _ := json.Marshal(ev.Payload)
		_ = json.Unmarshal(b, &want)
		if d.ID != ids[i] || d.Problem != "" || d.AggregateType != ev.AggregateType || d.AggregateID != ev.AggregateID ||
			d.EventType != ev.EventType || fmt.Sprint(payload) != fmt.Sprint(want) || d.CreatedAt == "" {
			t.Errorf("event %d decoded as %+v (payload %s), want %s %+v", i, d, d.Payload, ids[i], ev)
		}
	}
	if ids[0] == ids[1] {
		t.Error("two events emitted with one id")
	}
	if h := decoded[1].Headers; len(h) != 1 || h[0].Name != "traceparent" || h[0].Value != evs[1].Headers["traceparent"] {
		t.Errorf("emitted event's headers decoded as %v, want %v", h, evs[1].Headers)
	}
	if len(decoded[0].Headers) != 0 {
		t.Errorf("event without headers decoded with %v", decoded[0].Headers)
	}
}

// An invalid event is refused before anything is sent: the transaction
// stays usable and no message of the call is written.
func TestEmitRefused(t *testing.T) {
	env := relaytest.NewEnv(t, server)
	ctx := context.Background()
	slot := createSlot(t, env)
	tx, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	good := outbox.Event{AggregateType: "order", AggregateID: "1", EventType: "order.created", Payload: json.RawMessage(`{}`)}
	bad := good
	bad.Payload = json.RawMessage(`{"a":`)
	if _, err := outbox.Emit(ctx, tx, good, bad); !errors.Is(err, outbox.ErrInvalidPayload) {
		t.Fatalf("Emit with an invalid payload: %v", err)
	}
	ids, err := outbox.Emit(ctx, tx, good)
	if err != nil {
		t.Fatalf("the transaction is not usable after a refused event: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := emitted(t, env, slot, contract.DefaultMessagePrefix); len(got) != 1 || got[0].ID != ids[0] {
		t.Errorf("decoded %+v, want the one valid event", got)
	}
	for _, p := range []string{"", "a\x00b"} {
		if _, err := outbox.NewWriter(outbox.WithMessagePrefix(p)); err == nil {
			t.Errorf("prefix %q accepted", p)
		}
	}
}
