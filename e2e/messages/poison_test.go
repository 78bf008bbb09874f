package messages

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// TestPoisonEvents: rows that can never be published as they are (a payload
// over the server's max_payload, one over a max_msg_size lowered while the
// relay runs, a NULL payload) go to the dead-letter subject with the
// reason; the events after them keep flowing; the rows show in the
// dead-letter view; `dlq list` shows them and `dlq retry` republishes one
// once its row is fixed. An oversized payload is never sent as it is: the
// connection never drops.
func TestPoisonEvents(t *testing.T) {
	env := suite.NewEnv(t)
	small, err := devenv.StartNATS(devenv.NATSOptions{MaxPayload: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(small.Close)
	env.UseNATS(small.URL())
	env.Exec(`ALTER TABLE outbox_events ALTER COLUMN payload DROP NOT NULL`)
	relay := suite.StartRelay(t, env, "--ack-timeout", "2s")
	relay.WaitLog("streaming from the slot", 30*time.Second)

	big := `{"blob": "` + strings.Repeat("x", 100<<10) + `"}`
	a := env.Tx(relaytest.NewRow("order", "1", "a", `{}`))[0]
	tooBig := env.Tx(relaytest.NewRow("order", "1", "too.big", big))[0]
	var nullPayload string
	if err := env.Pool.QueryRow(context.Background(), `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', '1', 'null.payload', NULL) RETURNING id::text`).Scan(&nullPayload); err != nil {
		t.Fatal(err)
	}
	c := env.Tx(relaytest.NewRow("order", "1", "c", `{}`))[0]
	env.WaitStored(4, 30*time.Second)

	// An operator lowers the stream's max_msg_size while the relay runs:
	// JetStream itself refuses the next large message.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream := env.StreamHandle(time.Second)
	cfg := stream.CachedInfo().Config
	cfg.MaxMsgSize = 2000
	if _, err := env.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	refused := env.Tx(relaytest.NewRow("order", "1", "refused", `{"blob": "`+strings.Repeat("y", 3000)+`"}`))[0]
	e := env.Tx(relaytest.NewRow("order", "1", "e", `{}`))[0]
	env.WaitStored(6, 30*time.Second)
	env.Check()
	// The dead-letter path ran, for exactly the three rows, and nothing was
	// taken for a duplicate.
	waitMetric(t, relay, "outbox_relay_events_dead_lettered_total", 3)
	waitMetric(t, relay, relaytest.DuplicateAcksMetric, 0)

	stored := relaytest.StoredByID(t, env)
	for _, id := range []string{a, c, e} {
		if m := stored[id]; m == nil || !strings.HasPrefix(m.Subject, "outbox.") {
			t.Errorf("event %s not published normally", id)
		}
	}
	dead := map[string]string{tooBig: "larger than", nullPayload: "payload is NULL", refused: "message size exceeds maximum"}
	for id, reason := range dead {
		m := stored[id]
		if m == nil || m.Subject != env.DeadSubj {
			t.Errorf("event %s not on the dead-letter subject", id)
			continue
		}
		if got := m.Header.Get(contract.HeaderDeadLetterReason); !strings.Contains(got, reason) {
			t.Errorf("event %s: reason %q, want it to mention %q", id, got, reason)
		}
		if m.Header.Get(contract.HeaderOriginalSubject) == "" || m.Header.Get(contract.HeaderEventType) == "" {
			t.Errorf("event %s: dead letter lacks the original headers: %v", id, m.Header)
		}
	}
	if len(stored[tooBig].Data) != 0 || stored[tooBig].Header.Get(contract.HeaderPayloadOmitted) == "" {
		t.Error("the oversized payload went into the dead letter")
	}
	if strings.Contains(relay.Logs(), "disconnected from NATS") {
		t.Error("an oversized payload reached the server and dropped the connection")
	}

	var inView int
	if err := env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_dead_letters WHERE id::text = ANY($1)`,
		[]string{tooBig, nullPayload, refused}).Scan(&inView); err != nil || inView != 3 {
		t.Fatalf("dead-letter view shows %d of the 3 rows (%v)", inView, err)
	}
	out, err := suite.Relay.RunCLI(t, "dlq", "list", "--pg-url", env.PGURL)
	if err != nil || !strings.Contains(out, tooBig) || !strings.Contains(out, "payload is NULL") {
		t.Fatalf("dlq list (%v):\n%s", err, out)
	}

	retry := append([]string{"dlq", "retry", "--id", tooBig}, env.ToolArgs()...)
	if out, err := suite.Relay.RunCLI(t, retry...); err == nil || !strings.Contains(out, "still cannot be published") {
		t.Fatalf("retrying a row that is still too large (%v):\n%s", err, out)
	}
	env.Exec(`UPDATE outbox_events SET payload = '{"fixed": true}' WHERE id = $1`, tooBig)
	if out, err := suite.Relay.RunCLI(t, retry...); err != nil {
		t.Fatalf("dlq retry after fixing the row: %v\n%s", err, out)
	}
	env.WaitStored(7, 10*time.Second)
	m := relaytest.LastOnSubjects(t, env, "outbox.>")
	if m.Header.Get(contract.HeaderMsgID) != tooBig || string(m.Data) != `{"fixed": true}` {
		t.Errorf("retried event: %q %q", m.Header.Get(contract.HeaderMsgID), m.Data)
	}
	relaytest.RequireSameSource(t, relaytest.StoredByID(t, env)[refused], m)
	if out, _ := suite.Relay.RunCLI(t, "dlq", "list", "--pg-url", env.PGURL); strings.Contains(out, tooBig) {
		t.Errorf("retried event still listed:\n%s", out)
	}
}

// waitMetric waits until the relay's metric series is want.
func waitMetric(t *testing.T, r *relaytest.Relay, series string, want float64) {
	t.Helper()
	var got float64
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if got, err = r.Metric(series); err == nil && got == want {
			return
		}
	}
	t.Errorf("%s = %v (%v), want %v", series, got, err, want)
}
