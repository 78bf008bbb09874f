package bench

import (
	"bytes"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestHistogram(t *testing.T) {
	lats := []time.Duration{0, 250 * time.Microsecond, 251 * time.Microsecond, 3 * time.Millisecond, 2 * time.Second}
	got := histogram(lats)
	want := make([]float64, len(latencyBuckets)+1)
	want[0] = 40                   // 0 and exactly 0.25 ms
	want[1] = 20                   // ≤ 0.5 ms
	want[4] = 20                   // ≤ 4 ms
	want[len(latencyBuckets)] = 20 // over the last bound
	if !reflect.DeepEqual(got, want) {
		t.Errorf("histogram = %v, want %v", got, want)
	}
}

// TestHTMLReport: the page holds the three charts with every drain's
// curve, the throughput of each backlog beside its limits, and a latency
// series per rate.
func TestHTMLReport(t *testing.T) {
	r := &report{progress: io.Discard}
	recv := r.add("L1", "pg_recvlogical, 1-row transactions", 1000, time.Second)
	r.add("L2", "JetStream publish limit", 1000, 500*time.Millisecond)
	r.addDrain("R1", "relay drain, 1-row transactions", drainResult{events: 1000, took: 2 * time.Second,
		curve: []curvePoint{{0, 0}, {time.Second, 400}, {2 * time.Second, 1000}}}, recv)
	cold := coldResult{coldCase: coldCase{label: "1-row transactions, ~250 B", events: 500}, recv: time.Second, limit: time.Second / 4, lastStored: 2 * time.Second}
	cold.drain.curve = []curvePoint{{0, 0}, {1234 * time.Millisecond, 321}, {2 * time.Second, 500}}
	r.colds = append(r.colds, cold)
	r.latencies = append(r.latencies, latencyResult{rate: 1000, latencies: []time.Duration{time.Millisecond, 2 * time.Millisecond}})
	var page bytes.Buffer
	if err := r.writeHTML(&page); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	for _, want := range []string{
		"Drains", "Throughput", "Latency, commit to stored", // the charts
		"R1 relay drain, 1-row transactions", "C1 1-row transactions, ~250 B", "[1.234,321]", // the curves
		"pg_recvlogical", "JetStream limit", "1000/s", "echarts",
	} {
		if !strings.Contains(html, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if n := strings.Count(html, "echarts.init("); n != 3 {
		t.Errorf("%d charts, want 3", n)
	}
}
