package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/inspect"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// TestPollStatus: status --source poll reports the pending rows, the
// oldest one's age and those waiting for a retry instead of a slot, the
// dead letters, and exits 1 once the oldest pending row is older than
// --max-lag-age.
func TestPollStatus(t *testing.T) {
	env := suite.PollEnv(t, suite.NewEnv(t))
	status := func(extra ...string) (inspect.Report, int, string) {
		t.Helper()
		out, errOut, code := suite.Relay.RunSplit(t, append(append([]string{"status", "--source", "poll", "--json"}, env.ToolArgs()...), extra...)...)
		var r inspect.Report
		if err := json.Unmarshal([]byte(out), &r); err != nil || r.Poll == nil {
			t.Fatalf("status --source poll --json does not parse or has no poll section (%v), exit %d:\n%s\n%s", err, code, out, errOut)
		}
		return r, code, out + errOut
	}

	// One row the relay publishes, one it dead-letters (a reserved header).
	env.Tx(relaytest.NewRow("order", "1", "created", `{}`))
	env.Exec(`INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers)
		VALUES ('order', '2', 'created', '{}', '{"Nats-Msg-Id": "forged"}')`)
	relay := suite.StartRelay(t, env, append(relaytest.PollArgs, "--poll-max-attempts", "1")...)
	relay.WaitLog(relaytest.LogPolling, relaytest.FaultWait)
	for deadline := time.Now().Add(relaytest.FaultWait); relaytest.PendingRows(t, env) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) || relay.Exited() {
			t.Fatalf("rows still pending; log:\n%s", relay.Logs())
		}
	}
	relay.Drain(30 * time.Second)
	r, code, out := status("--max-lag-age", "1ms")
	if code != 0 || r.Poll.Pending != 0 || r.Poll.OldestPendingSeconds != nil || r.DeadLettersPending == nil || *r.DeadLettersPending != 1 {
		t.Errorf("status after the relay settled every row: exit %d, want 0, nothing pending and 1 dead letter:\n%s", code, out)
	}

	// A backlog with no relay: two rows, one waiting for a retry.
	ids := env.Tx(relaytest.NewRow("order", "3", "created", `{}`), relaytest.NewRow("order", "4", "created", `{}`))
	env.Exec(`UPDATE outbox_events SET attempts = 1, retry_after = now() + interval '1 hour' WHERE id = $1`, ids[0])
	waitOld := 50 * time.Millisecond
	time.Sleep(waitOld) // the rows' age, not synchronisation
	r, code, out = status()
	if code != 0 || r.Poll.Pending != 2 || r.Poll.WaitingForRetry != 1 || r.Poll.OldestPendingSeconds == nil || *r.Poll.OldestPendingSeconds < waitOld.Seconds() {
		t.Errorf("status with a backlog: exit %d, want 0 with 2 pending, 1 waiting, the oldest at least %s old:\n%s", code, waitOld, out)
	}
	if _, code, out := status("--max-lag-age", "1ms"); code != 1 || !strings.Contains(out, "--max-lag-age 1ms") {
		t.Errorf("status --max-lag-age 1ms with a backlog: exit %d, want 1 saying why:\n%s", code, out)
	}
	if _, code, out := status("--max-lag-age", "1h"); code != 0 {
		t.Errorf("status --max-lag-age 1h: exit %d, want 0:\n%s", code, out)
	}
	text, _, code := suite.Relay.RunSplit(t, append([]string{"status", "--source", "poll"}, env.ToolArgs()...)...)
	if code != 0 || !strings.Contains(text, "2 rows") || !strings.Contains(text, "1 waiting for a retry") || strings.Contains(text, "slot") {
		t.Errorf("status --source poll text: exit %d:\n%s", code, text)
	}
}
