package bench

import (
	"strings"
	"testing"
)

// TestTargets: each target is checked against its figure in the right
// direction, a target not met names the process that bounds it, and one
// the run did not measure says how to.
func TestTargets(t *testing.T) {
	f := map[string]float64{
		"c1.1row.relay_us": 11, "c1.1row.nats_us": 16.5, "c1.1row.walsender_us": 12.5, "c1.1row.pipeline_us": 40, "c1.1row.recv_pipeline_us": 34.4,
		"c1.1row.vs_recv_x": 0.75,
		"c1.10row.relay_us": 3.5, "c1.10row.nats_us": 14.5, "c1.10row.walsender_us": 7.5, "c1.10row.pipeline_us": 25.5, "c1.10row.vs_recv_x": 0.8,
		"r3.backlog.relay_rss_mib": 50, "r3.one_txn.relay_rss_mib": 120,
	}
	results := checkTargets(f)
	byKey := map[string]targetResult{}
	for _, r := range results {
		byKey[r.key] = r
	}
	for _, c := range []struct {
		key       string
		measured  bool
		met       bool
		bound     string
		measureAt float64
	}{
		{key: "c1_1row_relay_cpu", measured: true, bound: "relay", measureAt: 11},
		{key: "c1_10row_relay_cpu", measured: true, met: true, measureAt: 3.5},
		{key: "c1_1row_relay_share", measured: true, bound: "relay", measureAt: 27.5},
		{key: "c1_10row_relay_share", measured: true, met: true, measureAt: 100 * 3.5 / 25.5},
		{key: "c1_1row_drain", measured: true, bound: "nats-server, 16.5 µs/event", measureAt: 0.75},
		{key: "c1_10row_drain", measured: true, met: true, measureAt: 0.8},
		{key: "r2_1000_p99"},
		{key: "r2_1000_relay_cpu"},
		{key: "r3_backlog_rss", measured: true, met: true, measureAt: 50},
		{key: "r3_one_txn_rss", measured: true, bound: "relay (memory)", measureAt: 120},
	} {
		r, found := byKey[c.key]
		if !found {
			t.Errorf("no target %s", c.key)
			continue
		}
		if r.ok != c.measured || r.met != c.met || r.bound != c.bound || (c.measured && r.measured != c.measureAt) {
			t.Errorf("%s: measured %v (%v), met %v, bound %q; want %v (%v), met %v, bound %q", c.key, r.ok, r.measured, r.met, r.bound,
				c.measured, c.measureAt, c.met, c.bound)
		}
	}
	got := map[string]float64{}
	targetFigures(func(k string, v float64) { got[k] = v }, results)
	for k, v := range map[string]float64{"targets.c1_1row_drain.target_x": 1, "targets.c1_1row_drain.measured_x": 0.75, "targets.c1_1row_drain.met": 0,
		"targets.r3_backlog_rss.met": 1, "targets.r2_1000_p99.target_ms": 2} {
		if got[k] != v {
			t.Errorf("figure %s = %v, want %v", k, got[k], v)
		}
	}
	if _, ok := got["targets.r2_1000_p99.met"]; ok {
		t.Errorf("a target not measured has a met figure")
	}
	var out strings.Builder
	printTargets(&out, results)
	for _, want := range []string{"not measured: needs 1000 in --rates", "1-row: the relay's pipeline 40.0 µs/event (relay 11.0 + nats-server 16.5 + walsender 12.5), pg_recvlogical's 34.4"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the targets table lacks %q:\n%s", want, out.String())
		}
	}
}
