package bench

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFigures: the JSON report's figures are the tables' numbers, under
// their stable keys.
func TestFigures(t *testing.T) {
	r := recordedReport()
	r.polls = append(r.polls, pollResult{key: "r4.article_tick", events: 100, took: time.Second})
	f := r.figures(1500, 500)
	for key, want := range map[string]float64{
		"l1.recv.1row.rate_per_s":          1000,
		"l2.rate_per_s":                    2000,
		"r1.1row.rate_per_s":               500,
		"r1.1row.vs_recv_x":                0.5,
		"r1.1row.vs_limit_x":               0.25,
		"c1.1row.recv_per_s":               500,
		"c1.1row.relay_per_s":              250,
		"c1.1row.vs_recv_x":                0.5,
		"c1.1row.limit_per_s":              2000,
		"r2.1000.keeps_up":                 0,
		"r4.article_tick.rate_per_s":       100,
		"r4.article_tick.r1_1row_faster_x": 5,
		"check.events":                     1500,
		"check.cold_events":                500,
	} {
		if got, ok := f[key]; !ok || got != want {
			t.Errorf("figure %s = %v (present %v), want %v", key, got, ok, want)
		}
	}
	for key := range f {
		if strings.ContainsAny(key, " ,") {
			t.Errorf("figure key %q", key)
		}
	}
}

// TestRecordRoundTrip: a record written with --json reads back, with its
// load summarized from the samples.
func TestRecordRoundTrip(t *testing.T) {
	rec := Record{Commit: "abc", Command: commandLine([]string{"/tmp/go-build1/exe/outbox-relay", "bench", "--rates", ""}),
		Load:    summarizeLoad([]LoadSample{{0, 3}, {15, 9}, {30, 6}}),
		Figures: map[string]float64{"l2.rate_per_s": 50399}}
	path := filepath.Join(t.TempDir(), "report.json")
	if err := writeRecord(path, rec); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRecord(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Command != `outbox-relay bench --rates ""` || got.Load.Min != 3 || got.Load.Max != 9 || got.Load.Mean != 6 || got.Load.Start != 3 || got.Load.End != 6 || got.Figures["l2.rate_per_s"] != 50399 {
		t.Errorf("read back %+v", got)
	}
}
