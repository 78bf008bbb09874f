package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// benchRow is one throughput measurement.
type benchRow struct {
	key        string // its figures' key prefix in the JSON report (figures.go)
	kind, what string
	events     int
	took       time.Duration
	drain      *drainResult
	vsRecv     *benchRow // the pg_recvlogical run on the same backlog
	// walsnd is the CPU time of the walsender serving an L1 reader.
	walsnd      time.Duration
	walsndKnown bool
}

func (r *benchRow) rate() float64 { return float64(r.events) / r.took.Seconds() }

// report collects the measurements and prints them as tables.
type report struct {
	progress  io.Writer
	rows      []*benchRow
	latencies []latencyResult
	polls     []pollResult
	colds     []coldResult
	tables    []tablesResult
	shapes    []shapeResult
	splits    []splitResult
}

func (r *report) add(key, kind, what string, events int, took time.Duration) *benchRow {
	row := &benchRow{key: key, kind: kind, what: what, events: events, took: took}
	r.rows = append(r.rows, row)
	writeProgress(r.progress, "  %s: %d events in %s, %s events/s", kind, events, took.Round(time.Millisecond), thousands(row.rate()))
	return row
}

func (r *report) addDrain(key, kind, what string, d drainResult, vsRecv *benchRow) {
	row := r.add(key, kind, what, d.events, d.took)
	row.drain, row.vsRecv = &d, vsRecv
}

func (r *report) find(kind string) *benchRow {
	for _, row := range r.rows {
		if row.kind == kind {
			return row
		}
	}
	return nil
}

// print writes the tables; checked is how many events the table-vs-stream
// checks of the other runs covered, coldChecked how many those of the
// cold-start drains did.
func (r *report) print(out io.Writer, checked, coldChecked int) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	if len(r.rows) > 0 {
		r.printThroughput(out, w)
	}
	r.printShapes(out)
	r.printColds(out, coldChecked)
	r.printTables(out)
	r.printSplits(out)
	r.printRest(out, w, checked)
	printTargets(out, checkTargets(r.figures(checked, coldChecked)))
}

// printThroughput writes the throughput and resources tables.
func (r *report) printThroughput(out io.Writer, w *tabwriter.Writer) {
	fmt.Fprintln(out, "\nThroughput (one run, on this machine; Postgres, NATS and the relay share its cores)")
	fmt.Fprintln(w, "measure\tevents\tseconds\tevents/s\tvs pg_recvlogical\tvs JetStream limit\twalsender µs/event\t")
	js := r.find("L2")
	for _, row := range r.rows {
		if row.kind == "R3" {
			continue
		}
		vsRecv, vsJS := "", ""
		if row.vsRecv != nil {
			vsRecv = fmt.Sprintf("%.2f×", row.rate()/row.vsRecv.rate())
		}
		if row.kind == "R1" && js != nil {
			vsJS = fmt.Sprintf("%.2f×", row.rate()/js.rate())
		}
		walsnd := ""
		switch {
		case row.walsndKnown:
			walsnd = fmt.Sprintf("%.1f", float64(row.walsnd.Microseconds())/float64(row.events))
		case row.drain != nil && row.drain.walsndKnown:
			walsnd = fmt.Sprintf("%.1f", float64(row.drain.walsndCPU.Microseconds())/float64(row.events))
		}
		fmt.Fprintf(w, "%s %s\t%d\t%.2f\t%s\t%s\t%s\t%s\t\n", row.kind, row.what, row.events, row.took.Seconds(), thousands(row.rate()), vsRecv, vsJS, walsnd)
	}
	w.Flush()

	fmt.Fprintln(out, "\nResources during the drains (CPU time per event; peak resident memory of the relay process)")
	fmt.Fprintln(w, "run\tevents/s\trelay µs/event\trelay peak RSS\tnats-server µs/event\twalsender µs/event\t")
	for _, row := range r.rows {
		if row.drain == nil {
			continue
		}
		d := row.drain
		per := func(cpu time.Duration, known bool) string {
			if !known {
				return "n/a"
			}
			return fmt.Sprintf("%.1f", float64(cpu.Microseconds())/float64(d.events))
		}
		fmt.Fprintf(w, "%s %s\t%s\t%s\t%.0f MiB\t%s\t%s\t\n", row.kind, row.what, thousands(row.rate()), per(d.relayCPU, true),
			float64(d.relayRSS)/(1<<20), per(d.natsCPU, d.natsKnown), per(d.walsndCPU, d.walsndKnown))
	}
	w.Flush()
}

// printRest writes the latency and polling tables, and what the checks
// covered.
func (r *report) printRest(out io.Writer, w *tabwriter.Writer, checked int) {
	if len(r.latencies) > 0 {
		fmt.Fprintln(out, "\nLatency, commit to stored in the stream (one-row transactions from paced writers inside Postgres)")
		fmt.Fprintln(w, "target rate\twriters\tachieved\tevents\tp50\tp99\tmax\tp99 incl. COMMIT's flush\tstored after last commit\tkeeps up\t")
		for _, l := range r.latencies {
			keeps := "yes"
			if l.lagGrew || l.achieved < 0.9*l.rate {
				keeps = "no"
			}
			fmt.Fprintf(w, "%.0f/s\t%d\t%.0f/s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", l.rate, l.writers, l.achieved, l.events, ms(l.p50), ms(l.p99), ms(l.max), ms(l.p99WithCommit), ms(l.behind), keeps)
		}
		w.Flush()
		fmt.Fprintln(out, "\nWhere the CPU goes during the latency runs (µs per event; % of one core)")
		fmt.Fprintln(w, "target rate\trelay\tnats-server\twalsender\twriters' backends\t")
		for _, l := range r.latencies {
			c, secs := l.cpu, float64(l.events)/l.achieved
			share := func(cpu time.Duration, known bool) string {
				if !known {
					return "n/a"
				}
				return fmt.Sprintf("%.0f µs, %.0f%%", float64(cpu.Microseconds())/float64(l.events), 100*cpu.Seconds()/secs)
			}
			fmt.Fprintf(w, "%.0f/s\t%s\t%s\t%s\t%s\t\n", l.rate, share(c.relay, true), share(c.nats, c.natsKnown),
				share(c.walsender, c.walsenderKnown), share(c.writers, c.writersKnown))
		}
		w.Flush()
	}

	if len(r.polls) > 0 {
		fmt.Fprintln(out, "\nPolling: the seed article's relay (SKIP LOCKED, batches of 100, one-second poll, one PubAck at a time), then outbox-relay --source poll")
		fmt.Fprintln(w, "mode\tevents\tseconds\tevents/s\tthe relay is faster by\t")
		relay := r.find("R1")
		for _, p := range r.polls {
			rate := float64(p.events) / p.took.Seconds()
			faster := ""
			if relay != nil && rate > 0 {
				faster = fmt.Sprintf("%.0f×", relay.rate()/rate)
			}
			fmt.Fprintf(w, "%s\t%d\t%.1f\t%s\t%s\t\n", p.mode, p.events, p.took.Seconds(), thousands(rate), faster)
		}
		w.Flush()
	}
	if len(r.rows) == 0 && len(r.latencies) == 0 && len(r.polls) == 0 {
		return
	}
	every := "Every"
	if len(r.colds) > 0 {
		every = "Every other"
	}
	fmt.Fprintf(out, "\n%s relay run ended with the table-vs-stream check: %d events, none missing, extra, duplicated or out of order.\n", every, checked)
}

// printColds writes the cold-start drains' tables.
func (r *report) printColds(out io.Writer, checked int) {
	if len(r.colds) == 0 {
		return
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(out, "\nCold start: a backlog written while no relay ran, then `run` at its defaults as a fresh process, timed from its process start;")
	fmt.Fprintln(out, "pg_recvlogical on a second slot of the same backlog, timed from its process start; JetStream's limit for as many messages of the size")
	fmt.Fprintln(w, "case\tevents\tpayload\tpg_recvlogical/s\trelay/s, start to last PubAck\tvs pg_recvlogical\trelay/s, first to last PubAck\tvs pg_recvlogical\tJetStream limit/s\trelay vs limit\t")
	for _, c := range r.colds {
		recv := float64(c.events) / c.recv.Seconds()
		whole := float64(c.events) / c.lastStored.Seconds()
		steady := float64(c.events-1) / (c.lastStored - c.firstStored).Seconds()
		limit := float64(c.events) / c.limit.Seconds()
		fmt.Fprintf(w, "C1 %s\t%d\t%s\t%s\t%s\t%.2f×\t%s\t%.2f×\t%s\t%.2f×\t\n", c.label, c.events, size(c.payloadBytes),
			thousands(recv), thousands(whole), whole/recv, thousands(steady), steady/recv, thousands(limit), whole/limit)
	}
	w.Flush()
	fmt.Fprintln(out, "\nCold start: MB/s of payload, and the relay's start-up from its process start (its log lines; the first PubAck is the first event's stored time)")
	fmt.Fprintln(w, "case\tpg_recvlogical MB/s\trelay MB/s\tJetStream limit MB/s\tNATS connected\tslot taken up\tstreaming\tfirst PubAck\tlast PubAck\tslot confirmed\t")
	for _, c := range r.colds {
		mbs := func(d time.Duration) string { return fmt.Sprintf("%.1f", c.bytes()/d.Seconds()/1e6) }
		fmt.Fprintf(w, "C1 %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", c.label, mbs(c.recv), mbs(c.lastStored), mbs(c.limit),
			ms(c.natsUp), ms(c.takenUp), ms(c.streamed), ms(c.firstStored), ms(c.lastStored), ms(c.confirmed))
	}
	w.Flush()
	fmt.Fprintln(out, "\nCold start: CPU µs per event of each pipeline (the relay's from its process start; the walsender serving each reader)")
	fmt.Fprintln(w, "case\trelay\tnats-server\twalsender\trelay's pipeline\tpg_recvlogical\twalsender\tpg_recvlogical's pipeline\tdrain ratio when CPU-bound\t")
	for _, c := range r.colds {
		d := c.drain
		per := func(cpu time.Duration) string {
			return fmt.Sprintf("%.1f", float64(cpu.Microseconds())/float64(c.events))
		}
		opt := func(cpu time.Duration, known bool) string {
			if !known {
				return "n/a"
			}
			return per(cpu)
		}
		relayTotal, recvTotal, bound := "n/a", "n/a", "n/a"
		if d.natsKnown && d.walsndKnown {
			relayTotal = per(d.relayCPU + d.natsCPU + d.walsndCPU)
		}
		if c.recvWalsndKnown {
			recvTotal = per(c.recvCPU + c.recvWalsnd)
		}
		if d.natsKnown && d.walsndKnown && c.recvWalsndKnown {
			bound = fmt.Sprintf("%.2f×", cpuBoundRatio(d.relayCPU+d.natsCPU+d.walsndCPU, c.recvCPU+c.recvWalsnd))
		}
		fmt.Fprintf(w, "C1 %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", c.label, per(d.relayCPU), opt(d.natsCPU, d.natsKnown), opt(d.walsndCPU, d.walsndKnown),
			relayTotal, per(c.recvCPU), opt(c.recvWalsnd, c.recvWalsndKnown), recvTotal, bound)
	}
	w.Flush()
	fmt.Fprintln(out, "A drain that has no idle core (every core busy with other work) is paced by CPU: its ratio to pg_recvlogical tends to the last column,")
	fmt.Fprintln(out, "pg_recvlogical's pipeline CPU over the relay's (the relay's includes nats-server storing every event). Idle cores let the stages overlap and lift it.")
	fmt.Fprintf(out, "Each cold-start drain ended with the table-vs-stream check: %d events, none missing, extra, duplicated or out of order.\n", checked)
}

// cpuBoundRatio is the drain ratio to pg_recvlogical to expect when both
// pipelines are paced by CPU time alone: the same CPU buys recv/relay as
// many events for the relay as for pg_recvlogical.
func cpuBoundRatio(relay, recv time.Duration) float64 {
	if relay <= 0 {
		return 0
	}
	return float64(recv) / float64(relay)
}

// size writes a payload size in B or KiB.
func size(n int) string {
	if n < 2048 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f KiB", float64(n)/1024)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func thousands(f float64) string {
	n := int64(f + 0.5)
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
