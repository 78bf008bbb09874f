package atomic

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/internal/lab/devenv"
	"github.com/outbox-relay/outbox-relay/internal/lab/natsproc"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// BenchmarkAtomicSteadyLatency measures --atomic-transactions at a steady
// rate: transactions of two events written at ATOMIC_BENCH_TX_RATE per
// second (500: 1,000 events/s) for ATOMIC_BENCH_SECONDS (5), off and on
// alternating, one nats-server process: commit→stored (the relay's
// outbox_relay_commit_to_stored_seconds histogram: the share within 1 and
// 2 ms, and the bucket holding the 99th percentile) and the relay's and
// nats-server's CPU per event. Run it without -race:
//
//	go test -run '^$' -bench BenchmarkAtomicSteadyLatency -benchtime 1x ./e2e/atomic/
func BenchmarkAtomicSteadyLatency(b *testing.B) {
	rate, seconds, rounds := envInt("ATOMIC_BENCH_TX_RATE", 500), envInt("ATOMIC_BENCH_SECONDS", 5), envInt("ATOMIC_BENCH_ROUNDS", 2)
	nats, err := natsproc.Start(b.Context(), natsproc.Options{Exe: suite.NATS.Path, Args: []string{"-test.run=^$"},
		Server: devenv.NATSOptions{StoreDir: b.TempDir()}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nats.Kill)
	for range b.N {
		for r := 0; r < rounds; r++ {
			for _, atomic := range []bool{false, true} {
				steadyOnce(b, nats, rate, seconds, atomic)
			}
		}
	}
}

func steadyOnce(b *testing.B, nats *natsproc.Process, rate, seconds int, atomic bool) {
	env := suite.NewEnv(b)
	env.UseNATS(nats.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := env.JS.CreateStream(ctx, jetstream.StreamConfig{Name: env.Stream, Subjects: []string{"outbox.*.*", env.DeadSubj},
		Storage: jetstream.FileStorage, Duplicates: time.Minute, AllowAtomicPublish: true}); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = env.JS.DeleteStream(context.Background(), env.Stream) }()
	var flags []string
	if atomic {
		flags = append(flags, "--atomic-transactions")
	}
	relay := suite.StartRelay(b, env, flags...)
	relay.WaitLog(relaytest.LogStreaming, relaytest.FaultWait)
	n := rate * seconds
	relay0, server0 := cpuOf(b, relay.Pid()), cpuOf(b, nats.PID())
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i := 0; i < n; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
		env.Tx(relaytest.NewRow("order", strconv.Itoa(i%100), "created", `{"n":1}`), relaytest.NewRow("order", strconv.Itoa(i%100), "paid", `{"n":2}`))
	}
	relaytest.WaitFor(b, time.Minute, "every event stored", func() bool { return env.CountStored() >= uint64(2*n) })
	relayCPU, serverCPU := cpuOf(b, relay.Pid())-relay0, cpuOf(b, nats.PID())-server0
	m, err := relay.Metrics()
	if err != nil {
		b.Fatal(err)
	}
	relaytest.StopRelay(b, relay)
	within1, within2, p99 := latencies(m)
	b.Logf("atomic=%v: %d events at %d/s: commit→stored within 1 ms %.1f%%, within 2 ms %.1f%%, p99 ≤ %s; relay %.1f µs/event, nats-server %.1f µs/event",
		atomic, 2*n, 2*rate, 100*within1, 100*within2, p99, perEvent(relayCPU, 2*n), perEvent(serverCPU, 2*n))
}

// latencies reads the commit→stored histogram: the shares within 1 and
// 2 ms, and the upper bound of the bucket holding the 99th percentile.
func latencies(m relaytest.Metrics) (within1, within2 float64, p99 string) {
	const name = "outbox_relay_commit_to_stored_seconds_bucket{le=\""
	type bucket struct {
		le    float64
		text  string
		count float64
	}
	var bs []bucket
	for k, v := range m {
		if rest, ok := strings.CutPrefix(k, name); ok {
			text := strings.TrimSuffix(rest, "\"}")
			le, err := strconv.ParseFloat(text, 64)
			if err != nil {
				le = 1e9 // +Inf
			}
			bs = append(bs, bucket{le, text, v})
		}
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	if len(bs) == 0 {
		return 0, 0, "?"
	}
	total := bs[len(bs)-1].count
	for _, bk := range bs {
		switch bk.le {
		case 0.001:
			within1 = bk.count / total
		case 0.002:
			within2 = bk.count / total
		}
		if p99 == "" && bk.count >= 0.99*total {
			p99 = fmt.Sprintf("%s s", bk.text)
		}
	}
	return within1, within2, p99
}
