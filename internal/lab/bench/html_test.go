package bench

import (
	"bytes"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/lab/browser"
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

// recordedReport is a small run's results: a limit, a drain, a cold
// start, a latency run.
func recordedReport() *report {
	r := &report{progress: io.Discard}
	recv := r.add("l1.recv.1row", "L1", "pg_recvlogical, 1-row transactions", 1000, time.Second)
	r.add("l2", "L2", "JetStream publish limit", 1000, 500*time.Millisecond)
	r.addDrain("r1.1row", "R1", "relay drain, 1-row transactions", drainResult{events: 1000, took: 2 * time.Second,
		curve: []curvePoint{{0, 0}, {time.Second, 400}, {2 * time.Second, 1000}}}, recv)
	cold := coldResult{coldCase: coldCase{name: "c1_1row", label: "1-row transactions, ~250 B", events: 500}, recv: time.Second, limit: time.Second / 4, lastStored: 2 * time.Second}
	cold.drain.curve = []curvePoint{{0, 0}, {1234 * time.Millisecond, 321}, {2 * time.Second, 500}}
	r.colds = append(r.colds, cold)
	r.latencies = append(r.latencies, latencyResult{rate: 1000, latencies: []time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond}})
	return r
}

// TestHTMLReport: the page holds the three charts with every drain's
// curve, the throughput of each backlog beside its limits, and a latency
// series per rate; it has no script and loads nothing.
func TestHTMLReport(t *testing.T) {
	r := recordedReport()
	if got := r.drainChart().series[1]; got.name != "C1 1-row transactions, ~250 B" || got.points[1] != [2]float64{1.234, 321} {
		t.Errorf("the cold drain's curve: %+v", got)
	}
	tp := r.throughputChart()
	if want := [][2]float64{{0, 500}, {1, 250}}; !reflect.DeepEqual(tp.series[0].points, want) || tp.series[0].name != "relay" {
		t.Errorf("throughput %+v, want the relay at %v", tp.series[0], want)
	}
	if lat := r.latencyChart().series[0]; lat.name != "1000/s" || lat.points[2][1] != 33.33 || lat.points[3][1] != 33.33 || lat.points[4][1] != 33.33 || lat.points[5][1] != 0 {
		t.Errorf("latency series %+v", lat)
	}

	var page bytes.Buffer
	if err := r.writeHTML(&page); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	for _, want := range []string{
		`id="drains"`, `id="throughput"`, `id="latency"`, // the charts
		`data-name="R1 relay drain, 1-row transactions"`, `data-name="C1 1-row transactions, ~250 B"`, // the curves
		`data-name="pg_recvlogical"`, `data-name="JetStream limit"`, `data-name="1000/s"`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if n := strings.Count(html, "<svg "); n != 3 {
		t.Errorf("%d charts, want 3", n)
	}
	// Nothing to run, nothing to fetch: the only URL is SVG's namespace.
	if strings.Contains(html, "<script") || regexp.MustCompile(`\b(src|href)=`).MatchString(html) {
		t.Errorf("the page runs a script or loads a resource:\n%s", html)
	}
}

// TestHTMLReportInBrowser: Chromium, offline, draws every series of every
// chart of the recorded run's page.
func TestHTMLReportInBrowser(t *testing.T) {
	file := filepath.Join(t.TempDir(), "report.html")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := recordedReport().writeHTML(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	page := browser.Charts(t, file)
	for _, p := range page.Problems(50) {
		t.Error(p)
	}
	var got []string
	for _, c := range page.Charts {
		names := []string{c.ID + ":"}
		for _, s := range c.Series {
			names = append(names, s.Name)
		}
		got = append(got, strings.Join(names, " | "))
	}
	want := []string{
		"drains: | R1 relay drain, 1-row transactions | C1 1-row transactions, ~250 B",
		"throughput: | relay | pg_recvlogical | JetStream limit",
		"latency: | 1000/s",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Chromium saw the charts\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if t.Failed() {
		shot := filepath.Join(os.TempDir(), "outbox-relay-report-test.png")
		if err := os.WriteFile(shot, page.Screenshot, 0o644); err == nil {
			t.Logf("the page as Chromium drew it: %s", shot)
		}
	}
}

func TestNiceScale(t *testing.T) {
	for _, tc := range []struct{ v, top, step float64 }{
		{0, 1, 0.2}, {1000, 1000, 200}, {1234, 1500, 500}, {66.67, 80, 20}, {2.004, 2.5, 0.5}, {0.3, 0.3, 0.1}, {48213, 50000, 10000},
	} {
		top, step := niceScale(tc.v)
		if math.Abs(top-tc.top) > 1e-9 || math.Abs(step-tc.step) > 1e-9 {
			t.Errorf("niceScale(%v) = %v, %v; want %v, %v", tc.v, top, step, tc.top, tc.step)
		}
		if top < tc.v || top/step > 5+1e-9 {
			t.Errorf("niceScale(%v) = %v, %v: not above the value in at most 5 steps", tc.v, top, step)
		}
	}
	for _, tc := range []struct {
		v, step float64
		want    string
	}{{0, 200, "0"}, {12000, 2000, "12,000"}, {0.6000000000000001, 0.2, "0.6"}, {0.05, 0.05, "0.05"}} {
		if got := tick(tc.v, tc.step); got != tc.want {
			t.Errorf("tick(%v, %v) = %q, want %q", tc.v, tc.step, got, tc.want)
		}
	}
}

func TestWrap(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want []string
	}{
		{"R1 relay drain, 10-row transactions", 20, []string{"R1 relay drain,", "10-row transactions"}},
		{"≤ 128.0 ms", 20, []string{"≤ 128.0 ms"}},
		{"a b c d e f", 3, []string{"a b", "c d", "e f"}},
		{"one two three four five six", 5, []string{"one", "two", "thre…"}},
		{"unbreakable-word", 4, []string{"unbreakable-word"}},
	} {
		if got := wrap(tc.s, tc.n, 3); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("wrap(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}
