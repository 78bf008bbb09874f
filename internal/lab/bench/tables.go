package bench

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/sink"
)

// tablesResult is one drain of the several-tables comparison (T1): the
// same backlog of two tables drained by one relay reading both, or by two
// relays reading one each, each on its own slot.
type tablesResult struct {
	label  string
	relays int
	events int
	took   time.Duration
	// CPU time of the relays, and of the walsenders serving them, summed.
	relayCPU, walsndCPU time.Duration
	walsndKnown         bool
	natsCPU             time.Duration
	natsKnown           bool
}

// tables measures T1: a backlog of Tables events in each of two tables,
// written while no relay runs, drained first by one relay reading both
// tables (one slot, one walsender decoding the WAL once), then by two
// relays reading one table each (two slots, two walsenders, each decoding
// all of the WAL and sending its half). Both drains read the same WAL:
// every slot exists before the backlog is written.
func (b *bench) tables(ctx context.Context) error {
	n := b.cfg.Tables
	if n <= 0 {
		return nil
	}
	a, err := b.scenario(ctx, "t1_a")
	if err != nil {
		return err
	}
	bt, err := b.scenario(ctx, "t1_b")
	if err != nil {
		return err
	}
	both, err := newScenario("t1_both")
	if err != nil {
		return err
	}
	both.table, both.more = a.table, []contract.Table{bt.table}
	if both.subject, err = sink.ParseTemplate("bench_t1_both.{table}.{event_type}"); err != nil {
		return err
	}
	for _, t := range both.tables() {
		if err := migrations.AddToPublication(ctx, b.pool.Config().ConnConfig, migrations.Names{Table: t, Publication: both.publication}); err != nil {
			return err
		}
	}
	for _, sc := range []scenario{both, a, bt} {
		if err := b.firstRun(ctx, sc); err != nil {
			return err
		}
	}
	b.progress("T1: writing %d events into each of two tables, interleaved in ten rounds of one-row transactions (no relay runs)", n)
	var end pglogrepl.LSN
	for round := range 10 {
		part := n/10 + min(1, max(0, n%10-round))
		for _, sc := range []scenario{a, bt} {
			if end, err = sc.fill(ctx, b.pool, part, 1); err != nil {
				return err
			}
		}
	}
	a.quiesce(ctx, b.pool, b.progress)
	b.progress("T1: one relay reading both tables")
	one, err := b.drainTogether(ctx, "one relay, two tables (one slot)", []scenario{both}, []int{2 * n}, end)
	if err != nil {
		return err
	}
	b.progress("T1: two relays reading one table each, side by side")
	two, err := b.drainTogether(ctx, "two relays, one table each (two slots)", []scenario{a, bt}, []int{n, n}, end)
	if err != nil {
		return err
	}
	b.report.tables = append(b.report.tables, one, two)
	return nil
}

// firstRun runs the relay of sc briefly, which creates its slot as a first
// start would.
func (b *bench) firstRun(ctx context.Context, sc scenario) error {
	file := filepath.Join(b.dir, "relay-"+sc.name+"-init.log")
	relay, err := startChild(b.cfg.Self, b.relayArgs(sc), file)
	if err != nil {
		return err
	}
	if err := waitLogLine(ctx, file, "streaming from the slot"); err != nil {
		_ = relay.stop()
		return err
	}
	if err := relay.stop(); err != nil {
		return fmt.Errorf("first run of the relay of %s: %w", sc.name, err)
	}
	return nil
}

// drainTogether starts the relays of scs at once and waits until each
// stored its events (want[i]) and confirmed end; it measures the time
// until the last is done and the CPU time of the relays, their
// walsenders and nats-server meanwhile, then checks each stream against
// its tables.
func (b *bench) drainTogether(ctx context.Context, label string, scs []scenario, want []int, end pglogrepl.LSN) (tablesResult, error) {
	r := tablesResult{label: label, relays: len(scs), walsndKnown: true}
	streams := make([]jetstream.Stream, len(scs))
	before := make([]uint64, len(scs))
	for i, sc := range scs {
		var err error
		if streams[i], err = b.js.Stream(ctx, sc.stream); err != nil {
			return r, err
		}
		before[i] = streamCount(ctx, streams[i])
		r.events += want[i]
	}
	natsBefore, natsKnown := b.natsStat()
	relays := make([]*child, 0, len(scs))
	// stopAll stops the relays still running (every one on an error path).
	stopAll := func() {
		for _, c := range relays {
			_ = c.stop()
		}
		relays = relays[:0]
	}
	defer stopAll()
	for _, sc := range scs {
		c, err := startChild(b.cfg.Self, b.relayArgs(sc), filepath.Join(b.dir, "relay-"+sc.name+".log"))
		if err != nil {
			return r, err
		}
		relays = append(relays, c)
	}
	started := time.Now()
	dctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	walsnds := make([]int, len(scs))
	for i, sc := range scs {
		err := waitDrained(dctx, b.pool, sc.slot, end, func() uint64 {
			for j := range scs {
				if walsnds[j] == 0 {
					walsnds[j] = slotPID(ctx, b.pool, scs[j].slot)
				}
			}
			return streamCount(ctx, streams[i]) - before[i]
		}, want[i])
		if err != nil {
			return r, fmt.Errorf("%s: %w", sc.name, err)
		}
	}
	r.took = time.Since(started)
	for i := range scs {
		if st, ok := readProc(relays[i].pid()); ok {
			r.relayCPU += st.cpu
		}
		st, ok := readPostgresProc(walsnds[i])
		r.walsndCPU, r.walsndKnown = r.walsndCPU+st.cpu, r.walsndKnown && ok
	}
	if after, ok := b.natsStat(); ok && natsKnown {
		r.natsCPU, r.natsKnown = after.cpu-natsBefore.cpu, true
	}
	running := relays
	relays = nil // stopped here, not again by stopAll
	for i, sc := range scs {
		if err := running[i].stop(); err != nil {
			return r, fmt.Errorf("relay of %s exit: %w", sc.name, err)
		}
	}
	for i, sc := range scs {
		if _, err := b.verify(ctx, sc, streams[i]); err != nil {
			return r, err
		}
	}
	b.progress("  %s: %d events in %s, %s events/s", label, r.events, r.took.Round(time.Millisecond), thousands(float64(r.events)/r.took.Seconds()))
	return r, nil
}

// streamCount returns how many messages stream holds (0 when it cannot
// be read).
func streamCount(ctx context.Context, stream jetstream.Stream) uint64 {
	info, err := stream.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

// printTables writes T1's table.
func (r *report) printTables(out io.Writer) {
	if len(r.tables) == 0 {
		return
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(out, "\nSeveral tables: one backlog of two tables' interleaved one-row transactions, drained by one relay reading both, then by two relays reading one each")
	fmt.Fprintln(w, "run\trelays\twalsenders\tevents\tseconds\tevents/s\twalsender µs/event\trelay µs/event\tnats-server µs/event\t")
	for _, t := range r.tables {
		per := func(cpu time.Duration, known bool) string {
			if !known {
				return "n/a"
			}
			return fmt.Sprintf("%.1f", float64(cpu.Microseconds())/float64(t.events))
		}
		fmt.Fprintf(w, "T1 %s\t%d\t%d\t%d\t%.2f\t%s\t%s\t%s\t%s\t\n", t.label, t.relays, t.relays, t.events, t.took.Seconds(),
			thousands(float64(t.events)/t.took.Seconds()), per(t.walsndCPU, t.walsndKnown), per(t.relayCPU, true), per(t.natsCPU, t.natsKnown))
	}
	w.Flush()
	fmt.Fprintln(out, "Each T1 drain ended with the table-vs-stream check of its tables.")
}

// tables returns the scenario's tables, its own first.
func (s scenario) tables() []contract.Table { return append([]contract.Table{s.table}, s.more...) }
