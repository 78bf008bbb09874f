package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// TestMetricsAndHealth: /healthz answers, /readyz turns ready once the relay
// streams, and /metrics counts what was published and reports the slot.
func TestMetricsAndHealth(t *testing.T) {
	env := suite.NewEnv(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	relay := suite.StartRelay(t, env, "--metrics-addr", addr, "--log-level", "debug")
	relay.WaitLog("streaming from the slot", 30*time.Second)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz = %d", code)
	}
	deadline := time.Now().Add(10 * time.Second)
	for code, body := get("/readyz"); code != 200; code, body = get("/readyz") {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %d %q", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	env.Tx(relaytest.NewRow("order", "1", "a", `{}`), relaytest.NewRow("order", "1", "b", `{}`))
	env.WaitStored(2, 10*time.Second)
	var body string
	for deadline = time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		_, body = get("/metrics")
		if strings.Contains(body, "outbox_relay_events_published_total 2") && strings.Contains(body, `outbox_relay_slot_wal_status{status="reserved"} 1`) {
			break
		}
	}
	for _, want := range []string{"outbox_relay_events_published_total 2", "outbox_relay_publish_in_flight 0", "outbox_relay_slot_lag_bytes",
		"outbox_relay_confirmed_lsn", `outbox_relay_slot_wal_status{status="reserved"} 1`, "outbox_relay_replication_connected 1"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if !strings.Contains(relay.Logs(), `"event_type":"b","aggregate_id":"1"`) {
		t.Error("debug log lacks per-event fields")
	}
	// A real password and the whole output: TestMigrateAndLeastPrivilege.
	if strings.Contains(body, "postgres://") {
		t.Error("connection details leak into metrics")
	}
	env.NATS.Stop()
	for deadline = time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if code, _ := get("/readyz"); code == 503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("/readyz stayed ready with NATS down")
		}
	}
}
