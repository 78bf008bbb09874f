package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/inspect"
	"github.com/outbox-relay/outbox-relay/internal/jsoncheck"
	"github.com/outbox-relay/outbox-relay/internal/lab/bench"
	"github.com/outbox-relay/outbox-relay/internal/lab/browser"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// TestMigrateAndLeastPrivilege: migrate is idempotent, creates a role that
// can run the relay with nothing more than it needs, and status reports
// the slot and the last event. The relay runs as that role (its walsender
// is the role's), with a real password the server requires, and the
// password appears nowhere in the relay's output or metrics.
func TestMigrateAndLeastPrivilege(t *testing.T) {
	env := suite.NewEnv(t) // already migrated once
	out, err := suite.Relay.RunCLI(t, "migrate", "--pg-url", env.PGURL, "--relay-role", "relay_role", "--log-format", "json")
	if err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	if !strings.Contains(out, "already up to date") || !strings.Contains(out, "role ready") {
		t.Errorf("second migrate output:\n%s", out)
	}
	var super bool
	if err := env.Pool.QueryRow(t.Context(), `SELECT rolsuper FROM pg_roles WHERE rolname = 'relay_role'`).Scan(&super); err != nil || super {
		t.Fatalf("relay_role: superuser %v, %v", super, err)
	}

	secret := make([]byte, 12)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	password := "pw" + hex.EncodeToString(secret)
	env.Exec(`ALTER ROLE relay_role PASSWORD '` + password + `'`)
	url := strings.Replace(env.PGURL, "postgres://postgres@", "postgres://relay_role:"+password+"@", 1)
	requirePassword(t, env, "relay_role", strings.Replace(url, password, "wrong"+password, 1))

	args := append(env.RelayArgs(), "--pg-url", url)
	relay := relaytest.StartRelay(t, suite.Relay, append([]string{"run"}, args...)...)
	relay.WaitLog("streaming from the slot", 30*time.Second)
	var walsenderUser string
	if err := env.Pool.QueryRow(t.Context(), `SELECT r.usename FROM pg_stat_replication r JOIN pg_replication_slots s ON s.active_pid = r.pid
		WHERE s.slot_name = $1`, env.Slot).Scan(&walsenderUser); err != nil || walsenderUser != "relay_role" {
		t.Errorf("the relay's walsender runs as %q (%v), want the least-privilege role relay_role", walsenderUser, err)
	}
	id := env.Tx(relaytest.NewRow("order", "7", "created", `{"ok": true}`))[0]
	env.WaitStored(1, 30*time.Second)
	env.Check()

	out, err = suite.Relay.RunCLI(t, append([]string{"status", "--json"}, env.ToolArgs()...)...)
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	var st struct {
		inspect.Report
		LastEvent *inspect.EventJSON `json:"last_event"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if p := jsoncheck.Check([]byte(out)); p != nil {
		t.Errorf("status --json is not in the style of docs/json.md: %v\n%s", p, out)
	}
	if !st.Exists || !st.Active || st.WALStatus != "reserved" || st.LastEvent == nil || st.LastEvent.ID != id || st.StreamMessages != 1 {
		t.Errorf("status = %+v", st)
	}
	out, err = suite.Relay.RunCLI(t, append([]string{"status"}, env.ToolArgs()...)...)
	if err != nil || !strings.Contains(out, "active             yes, pid") || !strings.Contains(out, id) {
		t.Errorf("status text (%v):\n%s", err, out)
	}
	metrics, err := relay.Scrape()
	if err != nil {
		t.Fatal(err)
	}
	relaytest.StopRelay(t, relay)
	if strings.Contains(relay.Logs(), password) || strings.Contains(metrics, password) {
		t.Errorf("the relay's password appears in its output or metrics:\n%s", relay.Logs())
	}
}

// requirePassword makes the server ask role for its password on TCP
// connections from loopback (a line first in pg_hba.conf, removed at the
// end), unless it already does; wrongURL is the role's URL with a wrong
// password, which must then be refused.
func requirePassword(t *testing.T, env *relaytest.Env, role, wrongURL string) {
	t.Helper()
	refused := func() bool {
		conn, err := pgx.Connect(t.Context(), wrongURL)
		if err == nil {
			conn.Close(t.Context())
			return false
		}
		return true
	}
	if refused() {
		t.Logf("the server already requires %s's password", role)
		return
	}
	var file string
	if err := env.Pool.QueryRow(t.Context(), `SHOW hba_file`).Scan(&file); err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the server accepts any password for %s, and its pg_hba.conf cannot be edited here (%v): a password test would prove nothing", role, err)
	}
	line := fmt.Sprintf("host all %s 127.0.0.1/32 md5 # outbox-relay test %s\n", role, t.Name())
	if err := os.WriteFile(file, append([]byte(line), orig...), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cur, err := os.ReadFile(file); err == nil {
			_ = os.WriteFile(file, []byte(strings.Replace(string(cur), line, "", 1)), 0o600)
		}
		_, _ = env.Pool.Exec(context.Background(), `SELECT pg_reload_conf()`)
	})
	env.Exec(`SELECT pg_reload_conf()`)
	for deadline := time.Now().Add(10 * time.Second); !refused(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server still accepts a wrong password for %s after adding to pg_hba.conf:\n%s", role, line)
		}
	}
	t.Logf("%s: %s's password is required now (a wrong one is refused)", file, role)
}

// TestDevCommand runs the README's first command end to end: a throwaway
// Postgres, an embedded NATS, the relay and demo orders, then a clean exit
// that removes the temporary data. OUTBOX_PG_URL and OUTBOX_NATS_URL point
// at real servers meanwhile, as a relay's environment would: dev must not
// write there.
func TestDevCommand(t *testing.T) {
	b := newBystander(t)
	out, err := runCLIEnv(t, b.vars, "dev", "--count", "5", "--rate", "20", "--metrics-addr", "", "--log-format", "json")
	b.requireUntouched(t, "dev")
	if err != nil {
		t.Fatalf("dev: %v\n%s", err, out)
	}
	if !strings.Contains(out, "5 orders written, 5 events relayed, 5 consumed once") {
		t.Errorf("dev output:\n%s", out)
	}
	// Each written event is relayed once and consumed once, in that order.
	var written []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "written" && f[1] == "event" {
			written = append(written, f[2])
		}
	}
	if len(written) != 5 {
		t.Errorf("dev wrote %d orders, want 5:\n%s", len(written), out)
	}
	for _, id := range written {
		w := strings.Index(out, "written   event "+id)
		r := strings.Index(out, "relayed   event "+id)
		c := strings.Index(out, "consumed  event "+id+"  once")
		if strings.Count(out, "relayed   event "+id) != 1 || strings.Count(out, "consumed  event "+id) != 1 || !(w < r && r < c) {
			t.Errorf("event %s: not written, relayed and consumed once in order:\n%s", id, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "postgres  throwaway cluster") {
			dir := line[strings.Index(line, "(data in ")+len("(data in ") : strings.Index(line, ", removed")]
			if _, err := exec.Command("test", "-e", dir).CombinedOutput(); err == nil {
				t.Errorf("dev left its Postgres data in %s", dir)
			}
		}
	}
}

// TestBenchCommand: a small run of every benchmark measurement prints its
// tables, writes the latency samples, and ends with a clean check.
func TestBenchCommand(t *testing.T) {
	t.Parallel()
	samples := filepath.Join(t.TempDir(), "latency.csv")
	charts := filepath.Join(t.TempDir(), "report.html")
	figures := filepath.Join(t.TempDir(), "report.json")
	b := newBystander(t) // in the environment only: bench must not touch it
	out, err := runCLIEnv(t, b.vars, "bench", "--events", "3000", "--big", "2000", "--rates", "300", "--duration", "2s",
		"--baseline", "300", "--latency-file", samples, "--report", charts, "--json", figures)
	b.requireUntouched(t, "bench")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	flat := strings.Join(strings.Fields(out), " ") // the tables' column padding varies
	for _, want := range []string{
		"L1 pg_recvlogical, 1-row transactions 3000", "R1 relay drain, 10-row transactions 3000",
		"L2 JetStream publish limit", "R3 relay drain, 2000 events, one transaction",
		"one batch per tick (as written)", "Where the CPU goes during the latency runs",
		"outbox-relay --source poll", "table-vs-stream check: 10900 events, none missing",
		"L2S full: the relay's headers, as it sends them 13", "L2S id: Nats-Msg-Id only 1 63",
		"Targets (issue 23), from this run's figures", "relay peak RSS, one large transaction ≤ 100 MiB",
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("bench output lacks %q:\n%s", want, out)
		}
	}
	raw, err := os.ReadFile(samples)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(raw), "\n"); lines != 601 {
		t.Errorf("latency file has %d lines, want a header and 600 events", lines)
	}
	requireBenchRecord(t, figures, out)
	page, err := os.ReadFile(charts)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Drains", "R1 relay drain, 10-row transactions", "Latency, commit to stored", "300/s"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("--report page lacks %q", want)
		}
	}
	// The page as a person opens it, offline: every series of every chart
	// painted in Chromium, nothing fetched.
	drawn := browser.Charts(t, charts)
	for _, p := range drawn.Problems(20) {
		t.Errorf("--report page in Chromium: %s", p)
	}
	var titles []string
	for _, c := range drawn.Charts {
		titles = append(titles, c.Title)
	}
	if got := strings.Join(titles, ", "); got != "Drains, Throughput, Latency, commit to stored" {
		t.Errorf("Chromium drew the charts %s", got)
	}
}

// requireBenchRecord: bench --json wrote the run's figures, the tables it
// printed, and what they were measured on.
func requireBenchRecord(t *testing.T, path, out string) {
	t.Helper()
	rec, err := bench.ReadRecord(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rec.Command, "outbox-relay bench --events 3000") || rec.Commit == "" || rec.Error != "" {
		t.Errorf("--json: command %q, commit %q, error %q", rec.Command, rec.Commit, rec.Error)
	}
	if m := rec.Machine; m.Cores < 1 || m.MemoryBytes <= 0 || m.CPUModel == "" {
		t.Errorf("--json: machine %+v", m)
	}
	if v := rec.Versions; !strings.Contains(v.Postgres, "PostgreSQL") || v.NATSServer == "" || v.Go == "" {
		t.Errorf("--json: versions %+v", v)
	}
	if len(rec.Load.Samples) < 2 || rec.Load.Max < rec.Load.Min {
		t.Errorf("--json: load %+v", rec.Load)
	}
	if !strings.Contains(out, rec.Tables) || !strings.Contains(rec.Tables, "R1 relay drain, 10-row transactions") {
		t.Errorf("--json: the tables are not those printed:\n%s", rec.Tables)
	}
	for _, key := range []string{"r1.1row.vs_recv_x", "r1.10row.relay_us", "r3.one_txn.relay_rss_mib", "c1.1row.first_puback_ms",
		"c1.64k.cpu_bound_x", "r2.300.p99_ms", "r4.source_poll.rate_per_s", "check.events",
		"l2s.full.nats_us", "l2s.id.client_us", "targets.c1_1row_drain.measured_x", "targets.r3_one_txn_rss.met"} {
		if _, ok := rec.Figures[key]; !ok {
			t.Errorf("--json: no figure %s", key)
		}
	}
	if got := rec.Figures["check.events"]; got != 10900 {
		t.Errorf("--json: check.events %v, want 10900 as printed", got)
	}
}

// TestStopDuringStartup: SIGTERM while the relay still waits for NATS at
// start-up exits 0 and says so; --cpu-profile writes its profile.
func TestStopDuringStartup(t *testing.T) {
	t.Parallel()
	env := suite.NewEnv(t)
	env.RelayNATS = "nats://127.0.0.1:1" // nothing listens there
	dir := t.TempDir()
	r := suite.StartRelay(t, env, "--cpu-profile", filepath.Join(dir, "cpu-{pid}.prof"))
	r.WaitLog("NATS is not reachable yet", 30*time.Second)
	relaytest.StopRelay(t, r)
	if !strings.Contains(r.Logs(), "stopped during start-up") {
		t.Errorf("the relay did not say it stopped during start-up:\n%s", r.Logs())
	}
	profiles, _ := filepath.Glob(filepath.Join(dir, "cpu-*.prof"))
	if len(profiles) != 1 {
		t.Fatalf("--cpu-profile wrote %v", profiles)
	}
	if st, err := os.Stat(profiles[0]); err != nil || st.Size() == 0 {
		t.Errorf("--cpu-profile wrote an empty profile (%v)", err)
	}
	if out, err := suite.Relay.RunCLI(t, append([]string{"run", "--max-procs=-1"}, env.RelayArgs()...)...); err == nil || !strings.Contains(out, "--max-procs -1") {
		t.Errorf("run --max-procs -1 (%v):\n%s", err, out)
	}
}
