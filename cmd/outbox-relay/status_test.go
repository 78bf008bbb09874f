package main

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/inspect"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// TestStatusExitCodes: 0 when all is well, 1 for a missing slot, a lag past
// --max-lag-bytes, an inactive slot with --fail-inactive; 2 for bad flags
// and servers that cannot be reached.
func TestStatusExitCodes(t *testing.T) {
	t.Parallel()
	env := suite.NewEnv(t)
	status := func(extra ...string) (inspect.Report, int, string) {
		t.Helper()
		out, errOut, code := suite.Relay.RunSplit(t, append(append([]string{"status", "--json"}, env.ToolArgs()...), extra...)...)
		var r inspect.Report
		if code != 2 {
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("status --json does not parse (%v), exit %d:\n%s\n%s", err, code, out, errOut)
			}
		}
		return r, code, out + errOut
	}
	if r, code, out := status(); code != 1 || len(r.Problems) == 0 || !strings.Contains(r.Problems[0], "does not exist") {
		t.Errorf("status without a slot: exit %d, want 1:\n%s", code, out)
	}

	// A slot nobody streams from, WAL written after it, and the stream.
	env.Exec(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, env.Slot)
	env.Tx(relaytest.NewRow("order", "1", "created", `{"n": 1}`))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := env.JS.CreateStream(ctx, jetstream.StreamConfig{Name: env.Stream, Subjects: []string{"outbox.*.*", env.DeadSubj}}); err != nil {
		t.Fatal(err)
	}
	r, code, out := status()
	if code != 0 || !r.Exists || r.Active || r.LagBytes <= 0 {
		t.Fatalf("status with an idle slot and lag: exit %d, want 0 with lag > 0:\n%s", code, out)
	}
	if _, code, out := status("--max-lag-bytes", "1"); code != 1 || !strings.Contains(out, "--max-lag-bytes 1") {
		t.Errorf("status --max-lag-bytes 1 with %d bytes of lag: exit %d, want 1:\n%s", r.LagBytes, code, out)
	}
	if _, code, out := status("--max-lag-bytes", "1000000000"); code != 0 {
		t.Errorf("status --max-lag-bytes 1e9: exit %d, want 0:\n%s", code, out)
	}
	if _, code, out := status("--fail-inactive"); code != 1 || !strings.Contains(out, "is inactive") {
		t.Errorf("status --fail-inactive on an inactive slot: exit %d, want 1:\n%s", code, out)
	}
	if _, code, out := status("--nats-url", "nats://127.0.0.1:1"); code != 2 || !strings.Contains(out, "connection refused") {
		t.Errorf("status with NATS down: exit %d, want 2 and the cause:\n%s", code, out)
	}
	if _, code, out := status("--pg-url", "postgres://postgres@127.0.0.1:1/postgres"); code != 2 {
		t.Errorf("status with Postgres down: exit %d, want 2:\n%s", code, out)
	}
	for _, bad := range [][]string{{"--interval", "1ms"}, {"--no-such-flag"}, {"--watch"}} { // status() adds --json
		if _, code, out := status(bad...); code != 2 {
			t.Errorf("status %v: exit %d, want 2:\n%s", bad, code, out)
		}
	}
}

// TestStatusWatch: without a terminal, --watch prints one line per
// interval with the slot, the rate and the last event, and exits 0 on
// Ctrl-C (SIGINT).
func TestStatusWatch(t *testing.T) {
	t.Parallel()
	env := suite.NewEnv(t)
	relay := suite.StartRelay(t, env)
	relay.WaitLog("streaming from the slot", 30*time.Second)
	watch := relaytest.StartRelay(t, suite.Relay, append([]string{"status", "--watch", "--interval", "200ms"}, env.ToolArgs()...)...)
	watch.WaitLog(`slot="active pid`, 30*time.Second)
	for i := range 20 {
		env.Tx(relaytest.NewRow("order", "1", "created", `{"n": `+string(rune('0'+i%10))+`}`))
	}
	env.WaitStored(20, 30*time.Second)
	// Some interval saw events arrive.
	deadline := time.Now().Add(30 * time.Second)
	for !hasRate(watch.Logs()) {
		if time.Now().After(deadline) {
			t.Fatalf("no line with a positive rate:\n%s", watch.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := syscall.Kill(watch.Pid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := watch.Wait(30 * time.Second); code != 0 {
		t.Errorf("status --watch exited %d on SIGINT, want 0:\n%s", code, watch.Logs())
	}
	logs := watch.Logs()
	t.Logf("status --watch without a terminal:\n%s", logs)
	if strings.Contains(logs, "\x1b[") || !strings.Contains(logs, "last_event=") || !strings.Contains(logs, "dead_letters=\"0 not retried\"") {
		t.Errorf("watch output without a terminal:\n%s", logs)
	}
	relaytest.StopRelay(t, relay)
}

// hasRate reports whether a watch line shows a positive rate.
func hasRate(logs string) bool {
	for _, line := range strings.Split(logs, "\n") {
		i := strings.Index(line, `rate="`)
		if i >= 0 && !strings.HasPrefix(line[i:], `rate="0.0 `) {
			return true
		}
	}
	return false
}

// TestWatchViewTerminal: on a terminal the view is redrawn in place (cursor
// home, each line cleared to its end, the rest of the screen cleared) and
// the rate is the stream's sequence per second between samples.
func TestWatchViewTerminal(t *testing.T) {
	var b strings.Builder
	v := &watchView{w: &b, tty: true}
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	prev := inspect.Sample{At: at, Report: inspect.Report{Slot: "s", Stream: "OUTBOX", Exists: true, Active: true, ActivePID: 7, StreamLastSeq: 100}}
	cur := prev
	cur.At, cur.Report.StreamLastSeq = at.Add(2*time.Second), 120
	v.start()
	v.draw(cur, prev, time.Second)
	v.stop()
	out := b.String()
	for _, want := range []string{"\x1b[?25l\x1b[2J", "\x1b[H", "slot           active pid 7", "rate           10.0 msg/s\x1b[K\n", "\x1b[J", "\x1b[?25h"} {
		if !strings.Contains(out, want) {
			t.Errorf("terminal view lacks %q:\n%q", want, out)
		}
	}
}
