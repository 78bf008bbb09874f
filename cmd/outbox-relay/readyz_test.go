package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// readyz returns the relay's /readyz status code and body.
func readyz(t *testing.T, r *relaytest.Relay) (int, string) {
	t.Helper()
	addr, err := r.MetricsAddr()
	if err != nil {
		t.Fatal(err)
	}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitReadyz polls /readyz until it answers code.
func waitReadyz(t *testing.T, r *relaytest.Relay, code int, timeout time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, body := readyz(t, r)
		if got == code {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: /readyz = %d %q after %s, want %d", what, got, strings.TrimSpace(body), timeout, code)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestStandbyIsReady: of two relays on one slot, the one waiting as a
// standby answers /readyz 200 while the other streams (a rolling update of
// a 2-replica Deployment would otherwise stall), and the healthcheck
// command says so; with NATS down both answer 503 and the healthcheck
// fails.
func TestStandbyIsReady(t *testing.T) {
	env := suite.NewEnv(t)
	active := suite.StartRelay(t, env)
	active.WaitLog(relaytest.LogStreaming, 30*time.Second)
	standby := suite.StartRelay(t, env)
	standby.WaitLog("waiting as a standby", 30*time.Second)

	waitReadyz(t, active, 200, 10*time.Second, "the active relay")
	waitReadyz(t, standby, 200, 10*time.Second, "the standby")
	if standby.CountLog(relaytest.LogStreaming) != 0 {
		t.Fatal("the standby streamed while the active relay held the slot")
	}
	addr, err := standby.MetricsAddr()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := suite.Relay.RunCLI(t, "healthcheck", "--metrics-addr", addr); err != nil || !strings.Contains(out, "ready") {
		t.Errorf("healthcheck of the standby (%v):\n%s", err, out)
	}
	if out, err := suite.Relay.RunCLI(t, "healthcheck", "--metrics-addr", addr, "--live"); err != nil || !strings.Contains(out, "ok") {
		t.Errorf("healthcheck --live of the standby (%v):\n%s", err, out)
	}

	env.NATS.Stop()
	waitReadyz(t, standby, 503, 20*time.Second, "the standby with NATS down")
	waitReadyz(t, active, 503, 20*time.Second, "the active relay with NATS down")
	if out, err := suite.Relay.RunCLI(t, "healthcheck", "--metrics-addr", addr); err == nil || !strings.Contains(out, "503") {
		t.Errorf("healthcheck of the standby with NATS down (%v):\n%s", err, out)
	}
	if out, err := suite.Relay.RunCLI(t, "healthcheck", "--metrics-addr", addr, "--live"); err != nil {
		t.Errorf("healthcheck --live with NATS down: the process still serves (%v):\n%s", err, out)
	}
}

// TestPGURLFile: the connection string can come from a file (a mounted
// secret) instead of the environment; both at once are refused.
func TestPGURLFile(t *testing.T) {
	env := suite.NewEnv(t)
	file := filepath.Join(t.TempDir(), "pg-url")
	if err := os.WriteFile(file, []byte(env.PGURL+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := suite.Relay.RunCLI(t, "migrate", "--pg-url-file", file); err != nil || !strings.Contains(out, "already up to date") {
		t.Errorf("migrate --pg-url-file (%v):\n%s", err, out)
	}
	if out, err := suite.Relay.RunCLI(t, "migrate", "--pg-url-file", file, "--pg-url", env.PGURL); err == nil || !strings.Contains(out, "both set") {
		t.Errorf("--pg-url with --pg-url-file (%v):\n%s", err, out)
	}
}
