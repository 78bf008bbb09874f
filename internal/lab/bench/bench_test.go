package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseRates(t *testing.T) {
	for _, tc := range []struct {
		list    string
		d       time.Duration
		want    []float64
		wantErr string
	}{
		{list: "1000,2500, 5000", d: 10 * time.Second, want: []float64{1000, 2500, 5000}},
		{list: "300,", d: 2 * time.Second, want: []float64{300}},
		{list: "", d: time.Second},
		{list: "fast", d: time.Second, wantErr: `--rates: "fast" is not a rate`},
		{list: "-5", d: time.Second, wantErr: "is not a rate"},
		{list: "0.5", d: time.Second, wantErr: "writes no events"},
	} {
		got, err := parseRates(tc.list, tc.d)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parseRates(%q) error = %v, want %q", tc.list, err, tc.wantErr)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("parseRates(%q) = %v, %v; want %v", tc.list, got, err, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("parseRates(%q) = %v; want %v", tc.list, got, tc.want)
			}
		}
	}
}

// TestSummarize: percentiles over commit-to-stored latencies, an event
// stored "before" its COMMIT returned counts as 0, and the lag after the
// last commit.
func TestSummarize(t *testing.T) {
	base := time.Unix(1_700_000_000, 0)
	var samples []latencySample
	for i := 0; i < 100; i++ { // latencies 1ms..100ms, in reverse order
		committed := base.Add(time.Duration(i) * time.Millisecond)
		samples = append(samples, latencySample{beforeCommit: committed.Add(-time.Millisecond), committed: committed,
			stored: committed.Add(time.Duration(100-i) * time.Millisecond)})
	}
	samples = append(samples, latencySample{beforeCommit: base, committed: base.Add(time.Millisecond), stored: base})
	r := summarize(samples)
	if r.events != 101 || r.p50 != 50*time.Millisecond || r.p99 != 99*time.Millisecond || r.max != 100*time.Millisecond {
		t.Errorf("summarize: events %d, p50 %s, p99 %s, max %s", r.events, r.p50, r.p99, r.max)
	}
	if r.p99WithCommit != 100*time.Millisecond {
		t.Errorf("p99 with COMMIT = %s, want 100ms", r.p99WithCommit)
	}
	// Last commit at 99ms, last stored at 100ms.
	if r.behind != time.Millisecond {
		t.Errorf("behind = %s, want 1ms", r.behind)
	}
}

func TestParseMicros(t *testing.T) {
	got, err := parseMicros("{1700000000000001,1700000000000002}")
	if err != nil || len(got) != 2 || got[1].UnixMicro() != 1700000000000002 {
		t.Errorf("parseMicros = %v, %v", got, err)
	}
	if got, err := parseMicros("{}"); err != nil || len(got) != 0 {
		t.Errorf("parseMicros({}) = %v, %v", got, err)
	}
	if _, err := parseMicros("{12,x}"); err == nil {
		t.Error("parseMicros accepted a non-number")
	}
}

func TestGrowing(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		lags []int64
		want bool
	}{
		{[]int64{1, 2, 3}, false},                            // too few samples
		{[]int64{mib, mib, 10 * mib, 12 * mib}, true},        // second half > 2× and > 4 MiB
		{[]int64{mib, mib, 3 * mib, 3 * mib}, false},         // > 2× but small
		{[]int64{8 * mib, 8 * mib, 9 * mib, 9 * mib}, false}, // large but steady
	} {
		if got := growing(tc.lags); got != tc.want {
			t.Errorf("growing(%v) = %v, want %v", tc.lags, got, tc.want)
		}
	}
}

func TestThousands(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 999.4: "999", 1000: "1,000", 1234567.8: "1,234,568"} {
		if got := thousands(in); got != want {
			t.Errorf("thousands(%v) = %q, want %q", in, got, want)
		}
	}
}

// TestStartupPhases: the relay's start-up read from its JSON log, as
// offsets from its process start; lines not found stay 0.
func TestStartupPhases(t *testing.T) {
	started := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	log := `{"level":"info","time":"2026-12-03T09:00:00.020Z","message":"starting outbox relay"}
not json
{"level":"info","time":"2026-12-03T09:00:00.055Z","message":"taking up the replication slot"}
{"level":"info","time":"2026-12-03T09:00:00.080Z","message":"streaming from the slot's confirmed position"}
{"level":"info","time":"2026-12-03T09:00:09.000Z","message":"streaming from the slot's confirmed position"}
`
	file := filepath.Join(t.TempDir(), "relay.log")
	if err := os.WriteFile(file, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	nats, takenUp, streaming := startupPhases(file, started)
	if nats != 20*time.Millisecond || takenUp != 55*time.Millisecond || streaming != 80*time.Millisecond {
		t.Errorf("startupPhases = %s, %s, %s; want 20ms, 55ms, 80ms (the first session)", nats, takenUp, streaming)
	}
	if n, u, s := startupPhases(filepath.Join(t.TempDir(), "none.log"), started); n != 0 || u != 0 || s != 0 {
		t.Errorf("startupPhases of a missing log = %s, %s, %s", n, u, s)
	}
}

// TestColdCases: the 64 KiB run has a tenth of the events, never none.
func TestColdCases(t *testing.T) {
	cases := coldCases(50000)
	if len(cases) != 4 || cases[0].events != 50000 || cases[1].perTxn != 10 || cases[3].events != 5000 || cases[3].payload != 64<<10 {
		t.Errorf("coldCases(50000) = %+v", cases)
	}
	if got := coldCases(5)[3].events; got != 1 {
		t.Errorf("coldCases(5): the 64 KiB run has %d events, want 1", got)
	}
	if size(250) != "250 B" || size(4096) != "4.0 KiB" {
		t.Errorf("size: %q, %q", size(250), size(4096))
	}
}

func TestCPUBoundRatio(t *testing.T) {
	// The 1-row case of a run at load ~9: the relay's pipeline used 72.6 µs
	// per event, pg_recvlogical's 36.1; the drain came out at 0.57×.
	got := cpuBoundRatio(72600*time.Microsecond, 36100*time.Microsecond)
	if got < 0.49 || got > 0.5 {
		t.Fatalf("cpuBoundRatio = %.3f, want 36.1/72.6 ≈ 0.497", got)
	}
	if got := cpuBoundRatio(0, time.Second); got != 0 {
		t.Fatalf("cpuBoundRatio with no relay CPU = %v, want 0", got)
	}
}

// TestOnlySteps: --only runs the measurements it names and no others.
func TestOnlySteps(t *testing.T) {
	for only, want := range map[string]int{"": 7, "limits": 1, "limits, cold": 2, "tables,split": 2} {
		b := &bench{cfg: Options{Only: only}}
		steps, err := b.steps()
		if err != nil || len(steps) != want {
			t.Errorf("--only %q: %d steps (%v), want %d", only, len(steps), err, want)
		}
	}
	if _, err := (&bench{cfg: Options{Only: "limits,nope"}}).steps(); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("--only nope: %v", err)
	}
}
