package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestRate: items a second, and the time left at that rate.
func TestRate(t *testing.T) {
	if rate, left := (Snapshot{Done: 250, Total: 1000, Elapsed: 5 * time.Second}).Rate(); rate != 50 || left != 15*time.Second {
		t.Errorf("rate %v, left %v; want 50 and 15s", rate, left)
	}
	if rate, left := (Snapshot{Done: 0, Total: 1000, Elapsed: time.Second}).Rate(); rate != 0 || left != 0 {
		t.Errorf("nothing done: rate %v, left %v", rate, left)
	}
}

// TestLine: a line has the count, the total, the rate and the time left.
func TestLine(t *testing.T) {
	var buf bytes.Buffer
	m := New("verifying", 100, zerolog.New(&buf))
	for range 10 {
		m.Add()
	}
	m.Line(m.began.Add(time.Second))
	for _, want := range []string{`"done":10`, `"total":100`, `"rows_per_second":10`, `"left":`, `"message":"verifying"`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("line lacks %s: %s", want, buf.String())
		}
	}
}
