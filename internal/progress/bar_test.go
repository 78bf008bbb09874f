package progress

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// t0 is the fake clock's start.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// TestProgressRender: the bar's percent, count, rate and time left; the
// count and rate alone without a total; the time taken at the end.
func TestProgressRender(t *testing.T) {
	for _, c := range []struct {
		name  string
		s     Snapshot
		final bool
		want  string
	}{
		{"known total", Snapshot{Msg: "replaying", Done: 12345, Total: 27000, Elapsed: 4 * time.Second},
			false, "replaying [#########-----------] 45% 12,345/27,000 rows 3,086/s 5s left"},
		{"label up to a colon", Snapshot{Msg: "verifying: reading the stream (total: x)", Unit: "messages", Done: 10, Total: 100, Elapsed: time.Second},
			false, "verifying [##------------------] 10% 10/100 messages 10/s 9s left"},
		{"label up to a comma", Snapshot{Msg: "publishing the rows the stream lacks, from the slot's snapshot", Done: 0, Total: 5},
			false, "publishing the rows the stream lacks [--------------------] 0% 0/5 rows"},
		{"unknown total", Snapshot{Msg: "deleting: confirmed rows", Done: 1234567, Elapsed: 2 * time.Second},
			false, "deleting 1,234,567 rows 617,283/s"},
		{"slow", Snapshot{Msg: "x", Done: 3, Total: 10, Elapsed: 2 * time.Second},
			false, "x [######--------------] 30% 3/10 rows 1.5/s 5s left"},
		{"final", Snapshot{Msg: "replaying", Done: 27000, Total: 27000, Elapsed: 8*time.Second + 420*time.Millisecond},
			true, "replaying [####################] 100% 27,000/27,000 rows 3,206/s in 8.4s"},
		{"more than the total", Snapshot{Msg: "v", Done: 12, Total: 10, Elapsed: time.Second},
			false, "v [####################] 100% 12/10 rows 12/s 0s left"},
	} {
		if got := Render(c.s, c.final); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}

// TestProgressBarThrottle: redraws in place at most every BarEvery, a
// line padded over a longer one, and a newline at the end.
func TestProgressBarThrottle(t *testing.T) {
	var buf bytes.Buffer
	b := NewBar(&buf)
	m := NewTo("deleting: rows", 0, b)
	m.began = t0
	draws := 0
	for i := range 50 { // 50 updates over 500ms: 5 redraws
		m.AddN(1000)
		m.Line(t0.Add(time.Duration(i+1) * 10 * time.Millisecond))
		if n := strings.Count(buf.String(), "\r"); n != draws {
			draws = n
		}
	}
	if draws != 5 {
		t.Errorf("%d redraws of 50 updates in 500ms, want 5: %q", draws, buf.String())
	}
	if strings.Contains(buf.String(), "\n") {
		t.Errorf("a newline before the end: %q", buf.String())
	}
	b.Finish(m.Snapshot(t0.Add(time.Second)))
	out := buf.String()
	if !strings.HasSuffix(out, "\rdeleting 50,000 rows 50,000/s in 1s\n") {
		t.Errorf("final line: %q", out[strings.LastIndex(out, "\r"):])
	}
	// A bar used again draws right away and ends alone on its line.
	buf.Reset()
	m2 := NewTo("replaying", 10, b)
	m2.began = t0
	m2.Add()
	m2.Line(t0.Add(time.Second))
	b.Finish(m2.Snapshot(t0.Add(2 * time.Second)))
	if want := "\rreplaying [##------------------] 10% 1/10 rows 1.0/s 9s left\rreplaying [##------------------] 10% 1/10 rows 0.5/s in 2s  \n"; buf.String() != want {
		t.Errorf("second meter:\n got %q\nwant %q", buf.String(), want)
	}
	// Nothing done nor drawn: nothing at all.
	buf.Reset()
	b.Finish(NewTo("x", 0, b).Snapshot(t0))
	if buf.Len() != 0 {
		t.Errorf("empty work drew %q", buf.String())
	}
}

// TestProgressEveryBar: Every redraws the bar and its stop ends the line.
func TestProgressEveryBar(t *testing.T) {
	var buf bytes.Buffer
	m := NewTo("replaying", 4, NewBar(&buf))
	stop := m.Every(context.Background(), 10*time.Second) // the bar's own pace, not the log's
	for range 4 {
		m.Add()
	}
	time.Sleep(3 * BarEvery / 2)
	stop()
	out := buf.String()
	if !strings.HasPrefix(out, "\rreplaying [") || !strings.HasSuffix(out, "\n") || strings.Count(out, "\r") < 2 ||
		!strings.Contains(out, "100% 4/4 rows") {
		t.Errorf("bar: %q", out)
	}
	buf.Reset()
	NewTo("x", 1, NewBar(&buf)).Every(context.Background(), -1)()
	if buf.Len() != 0 {
		t.Errorf("--progress negative drew %q", buf.String())
	}
}

// TestProgressLogNotBar: the log reporter (not a terminal, or the
// daemon) still writes log lines, no bar, and nothing more at the end.
func TestProgressLogNotBar(t *testing.T) {
	var buf bytes.Buffer
	m := NewTo("cleanup: deleting", 0, Log(zerolog.New(&buf)))
	stop := m.Every(context.Background(), 20*time.Millisecond)
	m.AddN(7)
	time.Sleep(70 * time.Millisecond)
	stop()
	out := buf.String()
	if !strings.Contains(out, `"done":7`) || !strings.Contains(out, `"message":"cleanup: deleting"`) ||
		strings.Contains(out, `"total"`) || strings.Contains(out, `"left"`) || strings.ContainsAny(out, "\r#") {
		t.Errorf("log lines: %q", out)
	}
}

// TestProgressGroup: digits in groups of three.
func TestProgressGroup(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -12345: "-12,345"} {
		if got := Group(n); got != want {
			t.Errorf("Group(%d) = %q, want %q", n, got, want)
		}
	}
}
