package bench

import (
	"fmt"
	"math"
	"time"
)

// The JSON report's figures: every number the tables show, under a key
// that stays the same from run to run, so that a page can quote one by its
// key (docs_test.go checks each quote against docs/bench/report.json).
//
// A key is <measure>.<case>.<figure>, the figure's last word its unit:
// _per_s events per second, _us CPU µs per event, _ms milliseconds, _x a
// ratio, _mib MiB, _mb_s MB/s of payload, _pct % of one core, _s seconds;
// events and bytes are counts.

// figures returns the report's figures; checked and coldChecked are how
// many events the table-vs-stream checks covered.
func (r *report) figures(checked, coldChecked int) map[string]float64 {
	f := map[string]float64{}
	put := func(key string, v float64) {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			f[key] = round(v, 4)
		}
	}
	js := r.find("L2")
	for _, row := range r.rows {
		r.rowFigures(put, row, js)
	}
	for _, l := range r.latencies {
		latencyFigures(put, l)
	}
	relay := r.find("R1")
	for _, p := range r.polls {
		k := p.key + "."
		rate := perSecond(p.events, p.took)
		put(k+"events", float64(p.events))
		put(k+"seconds_s", p.took.Seconds())
		put(k+"rate_per_s", rate)
		if relay != nil && rate > 0 {
			put(k+"r1_1row_faster_x", relay.rate()/rate)
		}
	}
	for _, c := range r.colds {
		coldFigures(put, c)
	}
	for _, sh := range r.shapes {
		shapeFigures(put, sh)
	}
	splitFigures(put, r.splits)
	put("check.events", float64(checked))
	put("check.cold_events", float64(coldChecked))
	targetFigures(put, checkTargets(f))
	return f
}

// perEvent is CPU time per event in µs, as the tables print it.
func perEvent(cpu time.Duration, events int) float64 {
	return float64(cpu.Microseconds()) / float64(events)
}

// rowFigures puts an L1, L2, R1 or R3 row's figures; js is the L2 row.
func (r *report) rowFigures(put func(string, float64), row, js *benchRow) {
	k := row.key + "."
	put(k+"events", float64(row.events))
	put(k+"seconds_s", row.took.Seconds())
	put(k+"rate_per_s", row.rate())
	if row.vsRecv != nil {
		put(k+"vs_recv_x", row.rate()/row.vsRecv.rate())
	}
	if row.kind == "R1" && js != nil {
		put(k+"vs_limit_x", row.rate()/js.rate())
	}
	if row.walsndKnown {
		put(k+"walsender_us", perEvent(row.walsnd, row.events))
	}
	d := row.drain
	if d == nil {
		return
	}
	put(k+"relay_us", perEvent(d.relayCPU, d.events))
	put(k+"relay_rss_mib", float64(d.relayRSS)/(1<<20))
	if d.natsKnown {
		put(k+"nats_us", perEvent(d.natsCPU, d.events))
	}
	if d.walsndKnown {
		put(k+"walsender_us", perEvent(d.walsndCPU, d.events))
	}
}

// latencyFigures puts an R2 run's figures, keyed by its target rate.
func latencyFigures(put func(string, float64), l latencyResult) {
	k := fmt.Sprintf("r2.%.0f.", l.rate)
	msOf := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	put(k+"writers", float64(l.writers))
	put(k+"achieved_per_s", l.achieved)
	put(k+"events", float64(l.events))
	put(k+"p50_ms", msOf(l.p50))
	put(k+"p99_ms", msOf(l.p99))
	put(k+"max_ms", msOf(l.max))
	put(k+"p99_incl_commit_ms", msOf(l.p99WithCommit))
	put(k+"after_last_commit_ms", msOf(l.behind))
	keeps := 1.0
	if l.lagGrew || l.achieved < 0.9*l.rate {
		keeps = 0
	}
	put(k+"keeps_up", keeps)
	if l.events == 0 || l.achieved <= 0 {
		return
	}
	secs := float64(l.events) / l.achieved
	share := func(name string, cpu time.Duration, known bool) {
		if known {
			put(k+name+"_us", perEvent(cpu, l.events))
			put(k+name+"_core_pct", 100*cpu.Seconds()/secs)
		}
	}
	share("relay", l.cpu.relay, true)
	share("nats", l.cpu.nats, l.cpu.natsKnown)
	share("walsender", l.cpu.walsender, l.cpu.walsenderKnown)
	share("writers", l.cpu.writers, l.cpu.writersKnown)
}

// coldFigures puts a cold start's figures, keyed by its case.
func coldFigures(put func(string, float64), c coldResult) {
	k := "c1." + coldKey(c.name) + "."
	msOf := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	recv := perSecond(c.events, c.recv)
	whole := perSecond(c.events, c.lastStored)
	steady := perSecond(c.events-1, c.lastStored-c.firstStored)
	limit := perSecond(c.events, c.limit)
	put(k+"events", float64(c.events))
	put(k+"payload_bytes", float64(c.payloadBytes))
	put(k+"recv_per_s", recv)
	put(k+"relay_per_s", whole)
	put(k+"vs_recv_x", whole/recv)
	put(k+"steady_per_s", steady)
	put(k+"steady_vs_recv_x", steady/recv)
	put(k+"limit_per_s", limit)
	put(k+"vs_limit_x", whole/limit)
	mbs := func(d time.Duration) float64 { return c.bytes() / d.Seconds() / 1e6 }
	put(k+"recv_mb_s", mbs(c.recv))
	put(k+"relay_mb_s", mbs(c.lastStored))
	put(k+"limit_mb_s", mbs(c.limit))
	put(k+"nats_connected_ms", msOf(c.natsUp))
	put(k+"taken_up_ms", msOf(c.takenUp))
	put(k+"streaming_ms", msOf(c.streamed))
	put(k+"first_puback_ms", msOf(c.firstStored))
	put(k+"last_puback_ms", msOf(c.lastStored))
	put(k+"confirmed_ms", msOf(c.confirmed))
	d := c.drain
	put(k+"relay_us", perEvent(d.relayCPU, c.events))
	put(k+"relay_rss_mib", float64(d.relayRSS)/(1<<20))
	put(k+"recv_us", perEvent(c.recvCPU, c.events))
	if d.natsKnown {
		put(k+"nats_us", perEvent(d.natsCPU, c.events))
	}
	if d.walsndKnown {
		put(k+"walsender_us", perEvent(d.walsndCPU, c.events))
	}
	if c.recvWalsndKnown {
		put(k+"recv_walsender_us", perEvent(c.recvWalsnd, c.events))
		put(k+"recv_pipeline_us", perEvent(c.recvCPU+c.recvWalsnd, c.events))
	}
	if d.natsKnown && d.walsndKnown {
		put(k+"pipeline_us", perEvent(d.relayCPU+d.natsCPU+d.walsndCPU, c.events))
		if c.recvWalsndKnown {
			put(k+"cpu_bound_x", cpuBoundRatio(d.relayCPU+d.natsCPU+d.walsndCPU, c.recvCPU+c.recvWalsnd))
		}
	}
}

// coldKey is a cold case's key: its scenario name without the c1_ prefix
// (1row, 10row, 4k, 64k).
func coldKey(name string) string {
	if len(name) > 3 && name[:3] == "c1_" {
		return name[3:]
	}
	return name
}
