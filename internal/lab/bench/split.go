package bench

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/replication"
)

// Past one slot (S1): one table's backlog read through one slot of the
// whole table, against two slots whose publications split the table with
// row filters on a hash of aggregate_id (Postgres 15+), read side by side.
// Each walsender still decodes all of the WAL; the filters only decide what
// it sends. The readers are pg_recvlogical: the relay does not run on a
// part of a table (docs/scaling.md says why).

// splitFilter is the row filter of part i of two: built-in immutable
// functions and operators only, as a publication's row filter must be.
// Every event of an aggregate lands in the same part, so each part keeps
// per-aggregate order. The sign bit is masked, not taken away with abs():
// abs() fails with "integer out of range" on the one hash value -2^31,
// and a row filter that fails stops the walsender at that row for good.
func splitFilter(i int) string {
	return fmt.Sprintf("((hashtext(aggregate_id) & 2147483647) %% 2 = %d)", i)
}

// splitResult is one read of the S1 backlog.
type splitResult struct {
	key, label string
	slots      int
	events     int
	took       time.Duration
	// CPU time of the readers and of the walsenders serving them, summed.
	recvCPU, walsndCPU time.Duration
	walsndKnown        bool
}

// split measures S1 over a backlog of Split one-row transactions: one
// slot of the whole table, then two slots of half the table each read at
// once, then the whole table again on a slot of its own (so that the
// machine's drift weighs on both sides; the one-slot figures sum both
// reads).
func (b *bench) split(ctx context.Context) error {
	n := b.cfg.Split
	if n <= 0 {
		return nil
	}
	var version int
	if err := b.pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return fmt.Errorf("S1: read the server version: %w", err)
	}
	if version < 150000 {
		return fmt.Errorf("S1 (--split) needs Postgres 15 or later for row filters; this server is %d", version)
	}
	sc, err := b.scenario(ctx, "s1")
	if err != nil {
		return err
	}
	pubs := []string{sc.publication + "_p0", sc.publication + "_p1"}
	for i, pub := range pubs {
		if err := b.createFilteredPublication(ctx, pub, sc, splitFilter(i)); err != nil {
			return err
		}
	}
	slots := []string{"recv_s1_all_a", "recv_s1_p0", "recv_s1_p1", "recv_s1_all_b"}
	// Dropped however the measure ends: a slot left behind keeps WAL (on a
	// --pg-url server, where the run's cleanup drops only bench_* slots).
	defer func() {
		for _, slot := range slots {
			_ = replication.DropSlot(context.WithoutCancel(ctx), b.pool, slot)
		}
	}()
	end, err := b.backlog(ctx, sc, n, 1, slots...)
	if err != nil {
		return err
	}
	var half int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM `+sc.table.Quoted()+` WHERE `+splitFilter(0)).Scan(&half); err != nil {
		return fmt.Errorf("S1: count the first part: %w", err)
	}
	b.progress("S1: %d events, %d in the first part and %d in the second", n, half, n-half)
	one := splitResult{key: "s1.one", label: "one slot, the whole table", slots: 1, walsndKnown: true}
	b.progress("S1: pg_recvlogical on one slot of the whole table")
	if err := b.readSlots(ctx, &one, end, []string{slots[0]}, []string{sc.publication}, n); err != nil {
		return err
	}
	two := splitResult{key: "s1.two", label: "two slots, half the table each (row filters)", slots: 2, walsndKnown: true}
	b.progress("S1: pg_recvlogical on two slots of half the table each, side by side")
	if err := b.readSlots(ctx, &two, end, slots[1:3], pubs, n); err != nil {
		return err
	}
	b.progress("S1: pg_recvlogical on one slot of the whole table, again")
	if err := b.readSlots(ctx, &one, end, []string{slots[3]}, []string{sc.publication}, n); err != nil {
		return err
	}
	b.report.splits = append(b.report.splits, one, two)
	return nil
}

// createFilteredPublication (re)creates pub for sc's table's inserts
// whose rows match filter.
func (b *bench) createFilteredPublication(ctx context.Context, pub string, sc scenario, filter string) error {
	for _, sql := range []string{`DROP PUBLICATION IF EXISTS ` + pub,
		`CREATE PUBLICATION ` + pub + ` FOR TABLE ` + sc.table.Quoted() + ` WHERE ` + filter + ` WITH (publish = 'insert')`} {
		if _, err := b.pool.Exec(ctx, sql); err != nil {
			return fmt.Errorf("S1: %s: %w", sql, err)
		}
	}
	return nil
}

// readSlots runs pg_recvlogical on every slot at once (slot i through
// publication pubs[i]) up to end, and adds to r the time until the last
// exits, their CPU time and their walsenders'; the backlog holds n events.
func (b *bench) readSlots(ctx context.Context, r *splitResult, end pglogrepl.LSN, slots, pubs []string, n int) error {
	type read struct {
		cpu, walsnd time.Duration
		known       bool
		err         error
	}
	done := make(chan read, len(slots))
	started := time.Now()
	for i, slot := range slots {
		go func() {
			watch := watchWalsender(ctx, b.pool, slot)
			_, cpu, err := pgRecvlogical(ctx, b.pgBinDir, b.pgURL, slot, pubs[i], end)
			walsnd, known := watch()
			done <- read{cpu: cpu, walsnd: walsnd, known: known, err: err}
		}()
	}
	var firstErr error
	for range slots {
		rd := <-done
		if rd.err != nil && firstErr == nil {
			firstErr = rd.err
		}
		r.recvCPU += rd.cpu
		r.walsndCPU += rd.walsnd
		r.walsndKnown = r.walsndKnown && rd.known
	}
	if firstErr != nil {
		return fmt.Errorf("S1, %s: %w", r.label, firstErr)
	}
	took := time.Since(started)
	r.took += took
	r.events += n
	b.progress("  %s: %d events in %s, %s events/s", r.label, n, took.Round(time.Millisecond), thousands(float64(n)/took.Seconds()))
	return nil
}

// splitFigures puts S1's figures: s1.one.…, s1.two.…, and the two slots
// against one.
func splitFigures(put func(string, float64), splits []splitResult) {
	for _, s := range splits {
		k := s.key + "."
		put(k+"events", float64(s.events))
		put(k+"rate_per_s", perSecond(s.events, s.took))
		put(k+"recv_us", perEvent(s.recvCPU, s.events))
		if s.walsndKnown {
			put(k+"walsender_us", perEvent(s.walsndCPU, s.events))
		}
	}
	if len(splits) == 2 {
		one, two := splits[0], splits[1]
		put("s1.two.vs_one_x", perSecond(two.events, two.took)/perSecond(one.events, one.took))
		if one.walsndKnown && two.walsndKnown {
			put("s1.two.walsender_vs_one_x", perEvent(two.walsndCPU, two.events)/perEvent(one.walsndCPU, one.events))
		}
	}
}

// printSplits writes S1's table.
func (r *report) printSplits(out io.Writer) {
	if len(r.splits) == 0 {
		return
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(out, "\nPast one slot: one table's backlog read by pg_recvlogical through one slot, and through two slots whose publications split it by a hash of aggregate_id")
	fmt.Fprintln(w, "run\tslots\tevents\tseconds\tevents/s\tvs one slot\twalsender µs/event\tpg_recvlogical µs/event\t")
	one := r.splits[0]
	for _, s := range r.splits {
		walsnd := "n/a"
		if s.walsndKnown {
			walsnd = fmt.Sprintf("%.1f", perEvent(s.walsndCPU, s.events))
		}
		fmt.Fprintf(w, "S1 %s\t%d\t%d\t%.2f\t%s\t%.2f×\t%s\t%.1f\t\n", s.label, s.slots, s.events, s.took.Seconds(), thousands(perSecond(s.events, s.took)),
			perSecond(s.events, s.took)/perSecond(one.events, one.took), walsnd, perEvent(s.recvCPU, s.events))
	}
	w.Flush()
	fmt.Fprintln(out, "The one-slot row sums two reads, before and after the two slots' (each on a slot of its own); every walsender decodes all of the WAL.")
}
