package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/replication"
)

// pgRecvlogical measures how fast Postgres's own pg_recvlogical receives
// the slot's WAL up to end (output to /dev/null): from its process start to
// its exit, and the CPU time it used.
func pgRecvlogical(ctx context.Context, binDir, pgURL, slot, publication string, end pglogrepl.LSN) (took, cpu time.Duration, err error) {
	bin := "pg_recvlogical"
	if binDir != "" {
		bin = filepath.Join(binDir, bin)
	}
	cmd := exec.CommandContext(ctx, bin, "-d", pgURL, "--slot", slot, "--start", "--no-loop",
		"-o", "proto_version=1", "-o", "publication_names="+publication, "-f", "/dev/null", "--endpos", end.String())
	cmd.Stderr = os.Stderr
	started := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, 0, fmt.Errorf("pg_recvlogical: %w", err)
	}
	took = time.Since(started)
	return took, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
}

// countingHandler receives and decodes like the relay but publishes
// nothing: it confirms each transaction as soon as it is decoded.
type countingHandler struct {
	want    int
	events  int
	flushed pglogrepl.LSN
	room    chan struct{}
	done    chan struct{}
}

func (h *countingHandler) Event(*decode.Event) bool {
	h.events++
	return true
}
func (h *countingHandler) Room() <-chan struct{} { return h.room }
func (h *countingHandler) Commit(end pglogrepl.LSN) {
	h.flushed = end
	if h.events >= h.want && h.done != nil {
		close(h.done)
		h.done = nil
	}
}
func (h *countingHandler) Idle(pglogrepl.LSN) {}
func (h *countingHandler) Flushed(context.Context, bool) (pglogrepl.LSN, error) {
	return h.flushed, nil
}
func (h *countingHandler) Drain(context.Context) error { return nil }

// bareReceiver measures the relay's own replication and decoding path,
// with publishing switched off, over want events of the slot.
func bareReceiver(ctx context.Context, pool *pgxpool.Pool, repl *pgconn.Config, slot, publication string, table contract.Table, want int) (time.Duration, error) {
	stream, err := replication.NewStream(replication.Config{Repl: repl, Slot: slot, Publication: publication, Table: table},
		pool, zerolog.Nop(), replication.NewMetrics(prometheus.NewRegistry()))
	if err != nil {
		return 0, err
	}
	done := make(chan struct{})
	h := &countingHandler{want: want, room: make(chan struct{}), done: done}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	started := time.Now()
	go func() { errc <- stream.Run(rctx, h) }()
	select {
	case <-done:
		took := time.Since(started)
		cancel()
		<-errc
		return took, nil
	case err := <-errc:
		return 0, fmt.Errorf("bare receiver stopped after %d events: %v", h.events, err)
	}
}

// jetStreamLimit measures how fast JetStream stores n messages like the
// relay's (same size, Nats-Msg-Id and headers) from one connection with
// the standard client's asynchronous publishing and a window of 1,024.
func jetStreamLimit(ctx context.Context, natsURL string, n, payloadSize int) (time.Duration, error) {
	run, err := storeMessages(ctx, natsURL, n, func(i int, subject string) *nats.Msg {
		ev := sampleEvent(i, payloadSize)
		return jssink.EventMsg(&ev, subject)
	}, nil)
	return run.took, err
}

// storeMessages publishes n messages made by msg into a stream of their
// own, from one connection with asynchronous publishing and a window of
// 1,024, and measures storing them: the time, this process's CPU time and,
// when natsStat reads it, nats-server's. The messages are made before the
// clock starts.
func storeMessages(ctx context.Context, natsURL string, n int, msg func(i int, subject string) *nats.Msg, natsStat func() (procStat, bool)) (storeRun, error) {
	var run storeRun
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return run, fmt.Errorf("connect to NATS: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1024))
	if err != nil {
		return run, err
	}
	name := fmt.Sprintf("BENCH_L2_%d", time.Now().UnixNano())
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"bench_l2_" + name + ".>"}, Storage: jetstream.FileStorage}); err != nil {
		return run, fmt.Errorf("create stream %s: %w", name, err)
	}
	defer js.DeleteStream(context.WithoutCancel(ctx), name)
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		msgs[i] = msg(i, "bench_l2_"+name+".order.created")
	}
	run.first = msgs[0]
	if natsStat == nil {
		natsStat = func() (procStat, bool) { return procStat{}, false }
	}
	natsBefore, natsKnown := natsStat()
	cpuBefore := selfCPU()
	started := time.Now()
	for _, m := range msgs {
		// A full window waits for room: on a loaded machine a PubAck can
		// take longer than the client's default stall wait (200 ms), which
		// would end the measurement rather than slow it.
		if _, err := js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute)); err != nil {
			return run, err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return run, ctx.Err()
	}
	run.took = time.Since(started)
	run.clientCPU = selfCPU() - cpuBefore
	if natsAfter, ok := natsStat(); ok && natsKnown {
		run.natsCPU, run.natsKnown = natsAfter.cpu-natsBefore.cpu, true
	}
	info, err := js.Stream(ctx, name)
	if err != nil {
		return run, err
	}
	if got := info.CachedInfo().State.Msgs; got != uint64(n) {
		return run, fmt.Errorf("JetStream stored %d of %d messages", got, n)
	}
	return run, nil
}
