package takeup

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// TestSharedStreamToolsSeeTheirTable: two relays, of two outbox tables,
// publish to one stream with one subject template. verify, status and dlq
// retry of each relay look only at their own table's messages: before the
// fix, `verify --table public.outbox2 --slot <its slot>` counted the other
// relay's 8 events as extra and exited 1, and `status` showed the other
// relay's last event; dlq retry's message carries Outbox-Replay, so no
// relay's tail search takes it for an event of its commit order.
func TestSharedStreamToolsSeeTheirTable(t *testing.T) {
	env := suite.NewEnv(t)
	env2 := withSlot(env, env.Slot+"_t2")
	env2.Table, env2.Pub = contract.Table{Schema: "public", Name: "outbox2"}, "outbox2_pub"
	env2.Migrate()
	r1 := suite.StartRelay(t, env)
	r1.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	r2 := suite.StartRelay(t, env2)
	r2.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)

	// Table 2: a poison row (a dead letter), then 5 events; table 1's 8
	// events come last, so the stream's newest message is table 1's.
	env2.Exec(`ALTER TABLE outbox2 ALTER COLUMN payload DROP NOT NULL`)
	var poison string
	env2.Exec(`INSERT INTO outbox2 (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'p', 'broken', NULL)`)
	if err := env2.Pool.QueryRow(t.Context(), `SELECT id::text FROM outbox2 WHERE payload IS NULL`).Scan(&poison); err != nil {
		t.Fatal(err)
	}
	ids2 := rows(env2, 5, "t2")
	env.WaitStored(6, time.Minute)
	rows(env, 8, "t1")
	env.WaitStored(14, time.Minute)

	for _, c := range []struct {
		env            *relaytest.Env
		rows, messages int
	}{{env, 8, 8}, {env2, 6, 6}} {
		out, err := suite.Relay.RunCLI(t, append([]string{"verify"}, c.env.ToolArgs()...)...)
		if want := fmt.Sprintf("%d committed rows, %d messages", c.rows, c.messages); err != nil || !strings.Contains(out, want) || !strings.Contains(out, "OK:") {
			t.Errorf("verify --table %s in the shared stream (%v), want %q and OK:\n%s", c.env.Table, err, want, out)
		}
	}

	stdout, stderr, code := suite.Relay.RunSplit(t, append([]string{"status", "--json"}, env2.ToolArgs()...)...)
	var st struct {
		LastEvent struct {
			ID string `json:"id"`
		} `json:"last_event"`
	}
	if err := json.Unmarshal([]byte(stdout), &st); err != nil || code != 0 || st.LastEvent.ID != ids2[len(ids2)-1] {
		t.Errorf("status of table 2's relay (exit %d, %v): last event %q, want table 2's last, %s:\n%s%s", code, err, st.LastEvent.ID, ids2[len(ids2)-1], stdout, stderr)
	}

	env2.Exec(`UPDATE outbox2 SET payload = '{}' WHERE id::text = $1`, poison)
	if out, err := suite.Relay.RunCLI(t, append([]string{"dlq", "retry", "--id", poison}, env2.ToolArgs()...)...); err != nil || !strings.Contains(out, "published") {
		t.Fatalf("dlq retry (%v):\n%s", err, out)
	}
	var retried bool
	for _, m := range relaytest.StreamInOrder(t, env) {
		if m.Header.Get(contract.HeaderMsgID) == poison {
			retried = true
			if got := m.Header.Get(contract.HeaderReplay); got != contract.ReplayRetry {
				t.Errorf("the retried event carries %s %q, want %q", contract.HeaderReplay, got, contract.ReplayRetry)
			}
			if got := m.Header.Get(contract.HeaderSourceTable); got != "public.outbox2" {
				t.Errorf("the retried event carries %s %q, want public.outbox2", contract.HeaderSourceTable, got)
			}
		}
	}
	if !retried {
		t.Error("the retried event is not in the stream")
	}
	relaytest.StopRelay(t, r1)
	relaytest.StopRelay(t, r2)
}
