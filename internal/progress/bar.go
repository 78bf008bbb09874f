package progress

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// BarEvery is the least time between two redraws of a bar: at most ten a
// second.
const BarEvery = 100 * time.Millisecond

// barWidth is the number of cells of a bar.
const barWidth = 20

// Bar is the reporter for a terminal: one line, redrawn in place (\r) at
// most every BarEvery, such as
//
//	replaying [#########-----------] 45% 12,345/27,000 rows 3,210/s 5s left
//
// and ended with a newline. Without a total it shows the count and the
// rate. Its label is the meter's message up to its first colon or comma.
type Bar struct {
	w    io.Writer
	mu   sync.Mutex
	last time.Time // of the last redraw; zero: none since the last Finish
	wide int       // length of the line drawn last
}

// NewBar returns a bar drawn on w (a terminal).
func NewBar(w io.Writer) *Bar { return &Bar{w: w} }

// Interval is BarEvery, unless every is negative (never).
func (b *Bar) Interval(every time.Duration) time.Duration {
	if every < 0 {
		return every
	}
	return BarEvery
}

// Show redraws the line, unless it was redrawn less than BarEvery ago.
func (b *Bar) Show(s Snapshot) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.last.IsZero() && s.At.Sub(b.last) < BarEvery {
		return
	}
	b.last = s.At
	b.draw(Render(s, false))
}

// Finish draws the final line, with the time taken, and a newline; it
// draws nothing when nothing was done nor drawn.
func (b *Bar) Finish(s Snapshot) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.Done > 0 || !b.last.IsZero() {
		b.draw(Render(s, true))
		fmt.Fprintln(b.w)
	}
	b.last, b.wide = time.Time{}, 0
}

// draw writes line over the one drawn last, padded to cover it.
func (b *Bar) draw(line string) {
	pad := max(b.wide-len(line), 0)
	b.wide = len(line)
	fmt.Fprint(b.w, "\r"+line+strings.Repeat(" ", pad))
}

// Render is the bar line of s; final shows the time taken instead of the
// time left.
func Render(s Snapshot, final bool) string {
	var sb strings.Builder
	if label, _, _ := strings.Cut(s.Msg, ":"); label != "" {
		label, _, _ = strings.Cut(label, ",")
		sb.WriteString(label + " ")
	}
	unit := s.Unit
	if unit == "" {
		unit = "rows"
	}
	rate, left := s.Rate()
	if s.Total > 0 {
		done := min(s.Done, s.Total)
		cells := done * barWidth / s.Total
		fmt.Fprintf(&sb, "[%s%s] %d%% %s/%s %s", strings.Repeat("#", cells), strings.Repeat("-", barWidth-cells),
			done*100/s.Total, Group(int64(s.Done)), Group(int64(s.Total)), unit)
	} else {
		fmt.Fprintf(&sb, "%s %s", Group(int64(s.Done)), unit)
	}
	if rate > 0 {
		if rate < 10 {
			fmt.Fprintf(&sb, " %.1f/s", rate)
		} else {
			fmt.Fprintf(&sb, " %s/s", Group(int64(rate)))
		}
	}
	switch {
	case final:
		fmt.Fprintf(&sb, " in %s", s.Elapsed.Round(time.Second/10))
	case s.Total > 0 && rate > 0:
		fmt.Fprintf(&sb, " %s left", left)
	}
	return sb.String()
}

// Group writes n with commas between groups of three digits.
func Group(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
