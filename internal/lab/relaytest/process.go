package relaytest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
)

// Binary is how tests start the relay: a program and the environment that
// makes it behave as `outbox-relay` (a test binary re-executing itself, or
// a built binary).
type Binary struct {
	Path string
	Env  []string
}

// Relay is a relay child process.
type Relay struct {
	t    testing.TB
	cmd  *exec.Cmd
	logs *SyncBuffer
	done chan struct{}
	err  error
	// metrics is whether the relay serves /metrics (--metrics-addr not
	// empty); metricsAddr is where, once read from its log.
	metrics     bool
	metricsAddr string
}

// StartRelay starts `outbox-relay args...`; it is killed when the test ends.
// With --metrics-addr (Env.RelayArgs gives 127.0.0.1:0) its metrics can be
// read with Metric.
func StartRelay(t testing.TB, bin Binary, args ...string) *Relay {
	t.Helper()
	r := &Relay{t: t, logs: &SyncBuffer{}, done: make(chan struct{}), metrics: servesMetrics(args)}
	r.cmd = exec.Command(bin.Path, args...)
	r.cmd.Env = append(os.Environ(), bin.Env...)
	r.cmd.Stdout = r.logs
	r.cmd.Stderr = r.logs
	devenv.DiesWithParent(r.cmd)
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("start relay: %v", err)
	}
	go func() {
		r.err = r.cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		r.Kill()
		if t.Failed() {
			t.Logf("relay pid %d log:\n%s", r.cmd.Process.Pid, tail(r.Logs(), 60))
		}
	})
	return r
}

// Pid is the process id.
func (r *Relay) Pid() int { return r.cmd.Process.Pid }

// Kill sends SIGKILL and waits for the process to end.
func (r *Relay) Kill() {
	select {
	case <-r.done:
		return
	default:
	}
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.done
}

// Term sends SIGTERM.
func (r *Relay) Term() { _ = r.cmd.Process.Signal(syscall.SIGTERM) }

// Wait waits for the process to exit and returns its exit code.
func (r *Relay) Wait(timeout time.Duration) int {
	r.t.Helper()
	select {
	case <-r.done:
	case <-time.After(timeout):
		r.t.Fatalf("relay did not exit within %s; log:\n%s", timeout, tail(r.Logs(), 40))
	}
	if r.err == nil {
		return 0
	}
	if ee, ok := r.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// Exited reports whether the process has ended.
func (r *Relay) Exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// Logs returns everything the relay wrote so far.
func (r *Relay) Logs() string { return r.logs.String() }

// WaitLog waits until the log contains substr.
func (r *Relay) WaitLog(substr string, timeout time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(r.Logs(), substr) {
		if time.Now().After(deadline) {
			r.t.Fatalf("relay log has no %q after %s; log:\n%s", substr, timeout, tail(r.Logs(), 40))
		}
		if r.Exited() && !strings.Contains(r.Logs(), substr) {
			r.t.Fatalf("relay exited (%v) without logging %q; log:\n%s", r.err, substr, tail(r.Logs(), 40))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// CountLog returns how many times the log contains substr.
func (r *Relay) CountLog(substr string) int { return strings.Count(r.Logs(), substr) }

// Drain stops the relay with SIGTERM and fails the test unless it exits 0
// within timeout: the relay drains its publishes, confirms the final
// position and stops, so nothing it sent can land in the stream later.
func (r *Relay) Drain(timeout time.Duration) {
	r.t.Helper()
	r.Term()
	if code := r.Wait(timeout); code != 0 {
		r.t.Fatalf("relay exited %d on SIGTERM, want 0; log:\n%s", code, tail(r.Logs(), 40))
	}
}

// InFlightMetric is the relay's gauge of events sent and not yet
// acknowledged (jetstream.Metrics.InFlight).
const InFlightMetric = "outbox_relay_publish_in_flight"

// DuplicateAcksMetric counts the publishes JetStream acknowledged as
// duplicates, that is, dropped (jetstream.Metrics.Duplicates).
const DuplicateAcksMetric = "outbox_relay_duplicate_acks_total"

// WaitInFlight waits until the relay reports events in flight (published,
// PubAck pending), scraping its /metrics, and returns how many: the moment
// to inject a fault that must hit publishes in flight. Write a backlog
// first (Env.Backlog): a relay that keeps up with a light load has nothing
// in flight most of the time.
func (r *Relay) WaitInFlight(timeout time.Duration) int {
	r.t.Helper()
	return int(r.WaitInFlightMetrics(timeout)[InFlightMetric])
}

// WaitInFlightMetrics is WaitInFlight returning the whole scrape that saw
// publishes in flight: other series read at that very moment (the
// duplicate acks of a relay about to be killed).
func (r *Relay) WaitInFlightMetrics(timeout time.Duration) Metrics {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		m, err := r.Metrics()
		n, ok := m[InFlightMetric]
		if err == nil && ok && n > 0 {
			return m
		}
		if r.Exited() {
			r.t.Fatalf("relay exited (%v) while the test waited for publishes in flight; log:\n%s", r.err, tail(r.Logs(), 40))
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("no publish in flight within %s (%s = %v, %v)", timeout, InFlightMetric, n, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Metrics is one scrape of a relay's /metrics: each sample by its series,
// a metric name with its labels when it has any.
type Metrics map[string]float64

// Metrics scrapes the relay's /metrics.
func (r *Relay) Metrics() (Metrics, error) {
	body, err := r.Scrape()
	if err != nil {
		return nil, err
	}
	m := Metrics{}
	for _, line := range strings.Split(body, "\n") {
		// The value is last: label values (row values among them) may
		// hold spaces.
		i := strings.LastIndexByte(line, ' ')
		if i < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m, nil
}

// Metric scrapes the relay's /metrics and returns the sample named series:
// a metric name, with its labels when it has any
// (`outbox_relay_slot_wal_status{status="reserved"}`).
func (r *Relay) Metric(series string) (float64, error) {
	m, err := r.Metrics()
	if err != nil {
		return 0, err
	}
	v, ok := m[series]
	if !ok {
		return 0, fmt.Errorf("/metrics has no %s", series)
	}
	return v, nil
}

// Scrape returns the relay's /metrics page.
func (r *Relay) Scrape() (string, error) {
	addr, err := r.MetricsAddr()
	if err != nil {
		return "", err
	}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return string(b), nil
}

// MetricsAddr returns the address the relay serves /metrics on, as it
// logged it (--metrics-addr 127.0.0.1:0 picks a free port).
func (r *Relay) MetricsAddr() (string, error) {
	if !r.metrics {
		return "", fmt.Errorf("relay pid %d serves no metrics (--metrics-addr is empty)", r.Pid())
	}
	if r.metricsAddr != "" {
		return r.metricsAddr, nil
	}
	for _, line := range strings.Split(r.Logs(), "\n") {
		if !strings.Contains(line, "serving /metrics") {
			continue
		}
		var entry struct {
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Addr != "" {
			r.metricsAddr = entry.Addr
			return entry.Addr, nil
		}
	}
	return "", fmt.Errorf("relay pid %d has not logged its metrics address yet", r.Pid())
}

// servesMetrics reports whether the last --metrics-addr of args (the one
// the relay uses) is not empty.
func servesMetrics(args []string) bool {
	serves := true // the relay's default address
	for i, a := range args {
		switch {
		case a == "--metrics-addr" && i+1 < len(args):
			serves = args[i+1] != ""
		case strings.HasPrefix(a, "--metrics-addr="):
			serves = a != "--metrics-addr="
		}
	}
	return serves
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = append([]string{fmt.Sprintf("… %d earlier lines", len(parts)-lines)}, parts[len(parts)-lines:]...)
	}
	return strings.Join(parts, "\n")
}
