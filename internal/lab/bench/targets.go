package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// The targets of issue 23, read from the run's own figures: each row
// says what was asked, what this run measured, whether it was met, and,
// when it was not, which process's CPU bounds it.

// target is one goal, checked against the figures of a run.
type target struct {
	key   string // its figures: targets.<key>.target_<unit>, .measured_<unit>, .met
	what  string
	unit  string // the key's unit word: us, pct, x, ms, mib
	limit float64
	// atLeast says the measure must reach limit; otherwise stay under it.
	atLeast bool
	// measure reads the measured value; ok is false when the run did not
	// measure it.
	measure func(f map[string]float64) (v float64, ok bool)
	// procs is the figure prefix (c1.1row., r2.1000.) whose relay_us,
	// nats_us and walsender_us tell which process bounds a target not
	// met; "" when the relay alone does (its own CPU or memory).
	procs string
	// missing says how to measure it when the run did not.
	missing string
	// detail, when set, writes the figures the measure comes from, for a
	// line under the table.
	detail func(f map[string]float64) string
}

// targets are issue 23's, in the order the table prints them.
func targets() []target {
	fig := func(key string) func(map[string]float64) (float64, bool) {
		return func(f map[string]float64) (float64, bool) { v, ok := f[key]; return v, ok }
	}
	share := func(c string) func(map[string]float64) (float64, bool) {
		return func(f map[string]float64) (float64, bool) {
			relay, ok1 := f[c+"relay_us"]
			all, ok2 := f[c+"pipeline_us"]
			if !ok1 || !ok2 || all <= 0 {
				return 0, false
			}
			return 100 * relay / all, true
		}
	}
	pipelines := func(c, label string) func(map[string]float64) string {
		return func(f map[string]float64) string {
			return fmt.Sprintf("%s: the relay's pipeline %.1f µs/event (relay %.1f + nats-server %.1f + walsender %.1f), pg_recvlogical's %.1f (pg_recvlogical %.1f + walsender %.1f)",
				label, f[c+"pipeline_us"], f[c+"relay_us"], f[c+"nats_us"], f[c+"walsender_us"], f[c+"recv_pipeline_us"], f[c+"recv_us"], f[c+"recv_walsender_us"])
		}
	}
	cold, r2, r3 := "needs --cold > 0", "needs 1000 in --rates", "needs --big > 0"
	return []target{
		{key: "c1_1row_relay_cpu", what: "relay CPU, cold start, 1-row, ~250 B", unit: "us", limit: 5, measure: fig("c1.1row.relay_us"), missing: cold},
		{key: "c1_10row_relay_cpu", what: "relay CPU, cold start, 10-row, ~250 B", unit: "us", limit: 4, measure: fig("c1.10row.relay_us"), missing: cold},
		{key: "c1_1row_relay_share", what: "relay's share of its pipeline's CPU, 1-row", unit: "pct", limit: 15, measure: share("c1.1row."), missing: cold, detail: pipelines("c1.1row.", "1-row")},
		{key: "c1_10row_relay_share", what: "relay's share of its pipeline's CPU, 10-row", unit: "pct", limit: 15, measure: share("c1.10row."), missing: cold, detail: pipelines("c1.10row.", "10-row")},
		{key: "c1_1row_drain", what: "drain vs pg_recvlogical, cold start, 1-row", unit: "x", limit: 1.0, atLeast: true,
			measure: fig("c1.1row.vs_recv_x"), procs: "c1.1row.", missing: cold},
		{key: "c1_10row_drain", what: "drain vs pg_recvlogical, cold start, 10-row", unit: "x", limit: 0.8, atLeast: true,
			measure: fig("c1.10row.vs_recv_x"), procs: "c1.10row.", missing: cold},
		{key: "r2_1000_p99", what: "p99 commit to stored at 1000/s", unit: "ms", limit: 2, measure: fig("r2.1000.p99_ms"), procs: "r2.1000.", missing: r2},
		{key: "r2_1000_relay_cpu", what: "relay CPU at 1000/s", unit: "us", limit: 50, measure: fig("r2.1000.relay_us"), missing: r2},
		{key: "r3_backlog_rss", what: "relay peak RSS, large backlog", unit: "mib", limit: 100, measure: fig("r3.backlog.relay_rss_mib"), missing: r3},
		{key: "r3_one_txn_rss", what: "relay peak RSS, one large transaction", unit: "mib", limit: 100, measure: fig("r3.one_txn.relay_rss_mib"), missing: r3},
	}
}

// targetResult is a target checked against a run.
type targetResult struct {
	target
	measured float64
	ok       bool // measured
	met      bool
	bound    string // for a target not met: the process whose CPU bounds it
	detail   string
}

// checkTargets checks every target against the run's figures f.
func checkTargets(f map[string]float64) []targetResult {
	var out []targetResult
	for _, t := range targets() {
		r := targetResult{target: t}
		r.measured, r.ok = t.measure(f)
		if r.ok {
			r.met = r.measured <= t.limit
			if t.atLeast {
				r.met = r.measured >= t.limit
			}
			if !r.met {
				r.bound = boundBy(f, t)
			}
			if t.detail != nil {
				r.detail = t.detail(f)
			}
		}
		out = append(out, r)
	}
	return out
}

// boundBy names the process that bounds t: the relay for its own CPU and
// memory; for a rate or a latency, the process of the pipeline that spent
// the most CPU per event (the first to run out of a core when the
// pipeline's stages overlap).
func boundBy(f map[string]float64, t target) string {
	if t.procs == "" {
		if t.unit == "mib" {
			return "relay (memory)"
		}
		return "relay"
	}
	best, most := "", -1.0
	for _, p := range []struct{ name, key string }{{"relay", "relay_us"}, {"nats-server", "nats_us"}, {"walsender", "walsender_us"}} {
		if v, ok := f[t.procs+p.key]; ok && v > most {
			best, most = p.name, v
		}
	}
	if best == "" {
		return "unknown (no CPU figures)"
	}
	return fmt.Sprintf("%s, %.1f µs/event", best, most)
}

// targetFigures puts the targets' figures into f.
func targetFigures(put func(string, float64), results []targetResult) {
	for _, r := range results {
		k := "targets." + r.key + "."
		put(k+"target_"+r.unit, r.limit)
		if !r.ok {
			continue
		}
		put(k+"measured_"+r.unit, r.measured)
		met := 0.0
		if r.met {
			met = 1
		}
		put(k+"met", met)
	}
}

// printTargets writes the targets table, when the run measured any.
func printTargets(out io.Writer, results []targetResult) {
	measured := false
	for _, r := range results {
		measured = measured || r.ok
	}
	if !measured {
		return
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(out, "\nTargets (issue 23), from this run's figures")
	fmt.Fprintln(w, "target\tasked\tmeasured\tmet\tbound by, when not met\t")
	for _, r := range results {
		op := "≤"
		if r.atLeast {
			op = "≥"
		}
		measured, met := "not measured: "+r.missing, ""
		if r.ok {
			measured, met = formatTarget(r.measured, r.unit), "no"
			if r.met {
				met = "yes"
			}
		}
		fmt.Fprintf(w, "%s\t%s %s\t%s\t%s\t%s\t\n", r.what, op, formatTarget(r.limit, r.unit), measured, met, r.bound)
	}
	w.Flush()
	for _, r := range results {
		if r.detail != "" {
			fmt.Fprintf(out, "CPU per event, cold start, %s.\n", r.detail)
		}
	}
}

// formatTarget writes v in the unit its key names.
func formatTarget(v float64, unit string) string {
	switch unit {
	case "us":
		return fmt.Sprintf("%.1f µs/event", v)
	case "pct":
		return fmt.Sprintf("%.0f%%", v)
	case "x":
		return fmt.Sprintf("%.2f×", v)
	case "ms":
		return fmt.Sprintf("%.2f ms", v)
	case "mib":
		return fmt.Sprintf("%.0f MiB", v)
	}
	return fmt.Sprint(v)
}
