package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	jssink "github.com/outbox-relay/outbox-relay/sink/jetstream"

	"github.com/jackc/pglogrepl"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/verify"
)

// drainResult is one backlog drain by the relay.
type drainResult struct {
	events      int
	took        time.Duration
	relayCPU    time.Duration
	relayRSS    int64
	natsCPU     time.Duration
	natsKnown   bool
	walsndCPU   time.Duration
	walsndKnown bool
	// curve is the events stored over time since the relay's start.
	curve []curvePoint
}

// drain starts the relay on a backlog of n events ending at end, waits
// until every event is stored and the slot is confirmed past end, and
// measures the relay, the NATS server and the walsender meanwhile.
func (b *bench) drain(ctx context.Context, sc scenario, n int, end pglogrepl.LSN) (drainResult, error) {
	stream, err := b.js.Stream(ctx, sc.stream)
	if err != nil {
		return drainResult{}, err
	}
	count := func() uint64 {
		info, err := stream.Info(ctx)
		if err != nil {
			return 0
		}
		return info.State.Msgs
	}
	before := count()
	natsBefore, natsKnown := b.natsStat()
	relay, err := startChild(b.cfg.Self, b.relayArgs(sc), filepath.Join(b.dir, "relay-"+sc.name+".log"))
	if err != nil {
		return drainResult{}, err
	}
	started := time.Now()
	dctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	walsnd := 0
	progress := newCurve(started)
	var stored uint64
	err = waitDrained(dctx, b.pool, sc.slot, end, func() uint64 {
		if walsnd == 0 {
			walsnd = slotPID(ctx, b.pool, sc.slot)
		}
		stored = count() - before
		progress.add(stored)
		return stored
	}, n)
	took := time.Since(started)
	r := drainResult{events: n, took: took, curve: progress.done(stored)}
	if st, ok := readProc(relay.pid()); ok {
		r.relayCPU, r.relayRSS = st.cpu, st.peakRSS
	}
	if natsAfter, ok := b.natsStat(); ok && natsKnown {
		r.natsCPU, r.natsKnown = natsAfter.cpu-natsBefore.cpu, true
	}
	if st, ok := readPostgresProc(walsnd); ok {
		r.walsndCPU, r.walsndKnown = st.cpu, true
	}
	if serr := relay.stop(); err == nil && serr != nil {
		err = fmt.Errorf("relay exit: %w", serr)
	}
	if err != nil {
		return r, err
	}
	return r, b.check(ctx, sc, stream)
}

// check ends every run: the table against the stream.
func (b *bench) check(ctx context.Context, sc scenario, stream jetstream.Stream) error {
	rows, err := b.verify(ctx, sc, stream)
	b.checked += rows
	return err
}

// verify compares the scenario's table with its stream and returns how
// many rows it checked.
func (b *bench) verify(ctx context.Context, sc scenario, stream jetstream.Stream) (int, error) {
	rep, err := verify.Run(ctx, b.pool, jssink.NewReader(b.js, stream, sc.subject.Filter(), sc.deadLetter, nil), verify.Options{Table: sc.table, MoreTables: sc.more})
	if err != nil {
		return 0, err
	}
	if !rep.OK() {
		return 0, fmt.Errorf("%s: table vs stream: %d missing, %d extra, %d duplicated, %d out of order", sc.name,
			len(rep.Missing), len(rep.Extra), len(rep.Duplicates), len(rep.OrderViolations))
	}
	return rep.Rows, nil
}

// waitLogLine waits until the relay's log file contains line.
func waitLogLine(ctx context.Context, file, line string) error {
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(file); err == nil && strings.Contains(string(b), line) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			b, _ := os.ReadFile(file)
			return fmt.Errorf("the relay did not log %q:\n%s", line, b)
		}
	}
}
