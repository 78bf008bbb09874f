package atomic

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
	"github.com/outbox-relay/outbox-relay/internal/lab/natsproc"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// BenchmarkAtomicDrainCPU measures what --atomic-transactions costs: the
// relay's and nats-server's CPU per event while a fresh relay process
// drains a backlog of ten-row transactions (~250 B payloads), with the
// option off and on, alternating, in one run, on one nats-server process
// (file storage) and one stream that allows atomic publishing. Run it
// without -race (the relay is then built without it):
//
//	go test -run '^$' -bench BenchmarkAtomicDrainCPU -benchtime 1x ./e2e/atomic/
//
// ATOMIC_BENCH_EVENTS (50000) and ATOMIC_BENCH_ROUNDS (2) size it.
func BenchmarkAtomicDrainCPU(b *testing.B) {
	events, rounds := envInt("ATOMIC_BENCH_EVENTS", 50000), envInt("ATOMIC_BENCH_ROUNDS", 2)
	nats, err := natsproc.Start(b.Context(), natsproc.Options{Exe: suite.NATS.Path, Args: []string{"-test.run=^$"},
		Server: devenv.NATSOptions{StoreDir: b.TempDir()}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nats.Kill)
	type total struct {
		relay, server time.Duration
		elapsed       time.Duration
		events        int
	}
	sums := map[bool]*total{false: {}, true: {}}
	for range b.N {
		for r := 0; r < rounds; r++ {
			for _, atomic := range []bool{false, true} {
				relayCPU, serverCPU, elapsed := drainOnce(b, nats, events, atomic)
				s := sums[atomic]
				s.relay += relayCPU
				s.server += serverCPU
				s.elapsed += elapsed
				s.events += events
				b.Logf("atomic=%v: %d events in %s: relay %.2f µs/event, nats-server %.2f µs/event", atomic, events, elapsed.Round(time.Millisecond),
					perEvent(relayCPU, events), perEvent(serverCPU, events))
			}
		}
	}
	for _, atomic := range []bool{false, true} {
		s := sums[atomic]
		name := map[bool]string{false: "off", true: "on"}[atomic]
		b.ReportMetric(perEvent(s.relay, s.events), "relay-µs/event-"+name)
		b.ReportMetric(perEvent(s.server, s.events), "nats-µs/event-"+name)
		b.ReportMetric(float64(s.events)/s.elapsed.Seconds(), "events/s-"+name)
	}
}

func perEvent(d time.Duration, n int) float64 { return float64(d.Microseconds()) / float64(n) }

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// drainOnce writes events rows, ten per transaction, into a new
// database while its relay is stopped, then starts a relay process and
// returns its CPU time and nats-server's until the stream holds them all,
// and how long that took.
func drainOnce(b *testing.B, nats *natsproc.Process, events int, atomic bool) (relayCPU, serverCPU, elapsed time.Duration) {
	env := suite.NewEnv(b)
	env.UseNATS(nats.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The same stream both ways: allow_atomic changes nothing for
	// ordinary messages.
	if _, err := env.JS.CreateStream(ctx, jetstream.StreamConfig{Name: env.Stream, Subjects: []string{"outbox.*.*", env.DeadSubj},
		Storage: jetstream.FileStorage, Duplicates: time.Minute, AllowAtomicPublish: true}); err != nil {
		b.Fatal(err)
	}
	var flags []string
	if atomic {
		flags = append(flags, "--atomic-transactions")
	}
	first := suite.StartRelay(b, env, flags...) // creates the slot
	first.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	relaytest.StopRelay(b, first)
	env.Exec(`DO $$ BEGIN FOR i IN 0..` + strconv.Itoa(events/10-1) + ` LOOP
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', (g % 1000)::text, 'created', jsonb_build_object('order_id', g, 'customer_id', 'customer-' || (g % 1000),
			'total', (g % 997) * 1.25, 'currency', 'EUR', 'items', jsonb_build_array(jsonb_build_object('sku', 'sku-' || (g % 50), 'qty', 1 + g % 3)),
			'note', repeat('x', 60))
		FROM generate_series(i * 10, i * 10 + 9) g;
		COMMIT;
	END LOOP; END $$`)
	server0 := cpuOf(b, nats.PID())
	started := time.Now()
	relay := suite.StartRelay(b, env, flags...)
	var relayAt time.Duration
	relaytest.WaitFor(b, 2*time.Minute, "the backlog stored", func() bool {
		if env.CountStored() < uint64(events) {
			return false
		}
		relayAt = cpuOf(b, relay.Pid())
		return true
	})
	elapsed = time.Since(started)
	serverCPU = cpuOf(b, nats.PID()) - server0
	relaytest.StopRelay(b, relay)
	if n := env.CountStored(); n != uint64(events) {
		b.Fatalf("stream holds %d messages, want %d", n, events)
	}
	// The next round has a stream of the same name and subjects.
	if err := env.JS.DeleteStream(ctx, env.Stream); err != nil {
		b.Fatal(err)
	}
	return relayAt, serverCPU, elapsed
}

// cpuOf reads a process's user and system CPU time from /proc.
func cpuOf(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command name (which may hold spaces): state is
	// field 3, utime 14 and stime 15, in clock ticks (100 per second).
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
