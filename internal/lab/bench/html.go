package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// writeHTML writes the run's charts as one HTML page: how each drain
// progressed from the relay's start, the relay's throughput beside
// pg_recvlogical's and JetStream's on the same backlogs, and the
// distribution of commit-to-stored latencies at each rate.
//
// The charts are SVG drawn here, inline in the page: it needs no script
// and loads nothing, so it shows the same on an air-gapped machine, as a
// CI artifact, or behind a Content-Security-Policy that forbids scripts
// (as Jenkins serves its archived HTML). A charting library loaded from a
// CDN rendered a blank page offline; embedding one would put a megabyte of
// minified JavaScript in the repository and in every report.
func (r *report) writeHTML(w io.Writer) error {
	var b strings.Builder
	b.WriteString(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>outbox-relay bench</title>
<style>
body { font-family: sans-serif; margin: 16px; background: #ffffff; color: #333333; }
.charts { display: flex; flex-wrap: wrap; justify-content: center; gap: 24px; }
figure.chart { margin: 0; }
figure.chart svg { max-width: 100%; height: auto; }
</style>
</head>
<body>
<div class="charts">
`)
	for _, c := range []*chart{r.drainChart(), r.throughputChart(), r.latencyChart()} {
		if c == nil {
			continue
		}
		fmt.Fprintf(&b, `<figure class="chart" id="%s" data-title="%s">`+"\n", c.id, esc(c.title))
		c.svg(&b)
		b.WriteString("</figure>\n")
	}
	b.WriteString("</div>\n</body>\n</html>\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write the HTML report: %w", err)
	}
	return nil
}

// drainChart plots, for every drain, the events stored against the
// seconds since the relay's process started.
func (r *report) drainChart() *chart {
	c := &chart{id: "drains", title: "Drains", subtitle: "events stored in the stream since the relay's process start",
		xName: "seconds", yName: "events"}
	add := func(name string, curve []curvePoint) {
		if len(curve) < 2 {
			return
		}
		s := series{name: name}
		for _, p := range curve {
			s.points = append(s.points, [2]float64{round(p.at.Seconds(), 3), float64(p.stored)})
		}
		c.series = append(c.series, s)
	}
	for _, row := range r.rows {
		if row.drain != nil {
			add(row.kind+" "+row.what, row.drain.curve)
		}
	}
	for _, cold := range r.colds {
		add("C1 "+cold.label, cold.drain.curve)
	}
	if len(c.series) == 0 {
		return nil
	}
	return c
}

// throughputChart compares, per backlog, the relay's drain with
// pg_recvlogical's read of the same backlog and JetStream's limit.
func (r *report) throughputChart() *chart {
	c := &chart{id: "throughput", title: "Throughput", yName: "events/s",
		subtitle: "events/s on the same backlog: the relay from its start, pg_recvlogical, JetStream storing alone"}
	relay, recv, limit := series{name: "relay"}, series{name: "pg_recvlogical"}, series{name: "JetStream limit"}
	addBar := func(s *series, v float64) {
		s.points = append(s.points, [2]float64{float64(len(c.categories) - 1), round(v, 1)})
	}
	js := r.find("L2")
	for _, row := range r.rows {
		if row.kind != "R1" {
			continue
		}
		c.categories = append(c.categories, row.kind+" "+row.what)
		addBar(&relay, row.rate())
		addBar(&recv, rateOf(row.vsRecv))
		addBar(&limit, rateOf(js))
	}
	for _, cold := range r.colds {
		c.categories = append(c.categories, "C1 "+cold.label)
		addBar(&relay, perSecond(cold.events, cold.lastStored))
		addBar(&recv, perSecond(cold.events, cold.recv))
		addBar(&limit, perSecond(cold.events, cold.limit))
	}
	if len(c.categories) == 0 {
		return nil
	}
	c.series = []series{relay, recv, limit}
	return c
}

// latencyBuckets are the upper bounds of the latency histogram's buckets,
// doubling from a quarter of a millisecond; the last bucket is open.
var latencyBuckets = func() []time.Duration {
	var b []time.Duration
	for d := 250 * time.Microsecond; d <= time.Second; d *= 2 {
		b = append(b, d)
	}
	return b
}()

// latencyChart draws, for every rate, the share of events per latency
// bucket.
func (r *report) latencyChart() *chart {
	if len(r.latencies) == 0 {
		return nil
	}
	c := &chart{id: "latency", title: "Latency, commit to stored", yName: "% of events",
		subtitle: "share of events per bucket, one series per target rate"}
	for _, d := range latencyBuckets {
		c.categories = append(c.categories, "≤ "+ms(d))
	}
	c.categories = append(c.categories, "> "+ms(latencyBuckets[len(latencyBuckets)-1]))
	for _, l := range r.latencies {
		s := series{name: fmt.Sprintf("%.0f/s", l.rate)}
		for i, share := range histogram(l.latencies) {
			s.points = append(s.points, [2]float64{float64(i), share})
		}
		c.series = append(c.series, s)
	}
	return c
}

// histogram returns the percentage of lats in each latency bucket.
func histogram(lats []time.Duration) []float64 {
	counts := make([]float64, len(latencyBuckets)+1)
	for _, l := range lats {
		i := 0
		for i < len(latencyBuckets) && l > latencyBuckets[i] {
			i++
		}
		counts[i]++
	}
	for i := range counts {
		if len(lats) > 0 {
			counts[i] = round(100*counts[i]/float64(len(lats)), 2)
		}
	}
	return counts
}

// rateOf is row's rate, NaN (no bar) without a row.
func rateOf(row *benchRow) float64 {
	if row == nil {
		return math.NaN()
	}
	return row.rate()
}

func perSecond(events int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(events) / d.Seconds()
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}
