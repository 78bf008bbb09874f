package bench

import (
	"fmt"
	"io"
	"math"
	"time"

	"github.com/go-echarts/go-echarts/v2/charts"
	"github.com/go-echarts/go-echarts/v2/components"
	"github.com/go-echarts/go-echarts/v2/opts"
)

// writeHTML writes the run's charts as one HTML page: how each drain
// progressed from the relay's start, the relay's throughput beside
// pg_recvlogical's and JetStream's on the same backlogs, and the
// distribution of commit-to-stored latencies at each rate. The page draws
// them with ECharts (go-echarts), which the browser loads from the
// go-echarts asset host when the page is opened.
func (r *report) writeHTML(w io.Writer) error {
	page := components.NewPage().SetPageTitle("outbox-relay bench")
	page.SetLayout(components.PageFlexLayout)
	if c := r.drainChart(); c != nil {
		page.AddCharts(c)
	}
	if c := r.throughputChart(); c != nil {
		page.AddCharts(c)
	}
	if c := r.latencyChart(); c != nil {
		page.AddCharts(c)
	}
	if err := page.Render(w); err != nil {
		return fmt.Errorf("write the HTML report: %w", err)
	}
	return nil
}

func chartSize() opts.Initialization {
	return opts.Initialization{Width: "1100px", Height: "500px"}
}

// drainChart plots, for every drain, the events stored against the
// seconds since the relay's process started.
func (r *report) drainChart() *charts.Line {
	type drain struct {
		name  string
		curve []curvePoint
	}
	var drains []drain
	for _, row := range r.rows {
		if row.drain != nil && len(row.drain.curve) > 1 {
			drains = append(drains, drain{row.kind + " " + row.what, row.drain.curve})
		}
	}
	for _, c := range r.colds {
		if len(c.drain.curve) > 1 {
			drains = append(drains, drain{"C1 " + c.label, c.drain.curve})
		}
	}
	if len(drains) == 0 {
		return nil
	}
	line := charts.NewLine()
	line.SetGlobalOptions(
		charts.WithInitializationOpts(chartSize()),
		charts.WithTitleOpts(opts.Title{Title: "Drains", Subtitle: "events stored in the stream since the relay's process start"}),
		charts.WithXAxisOpts(opts.XAxis{Type: "value", Name: "seconds"}),
		charts.WithYAxisOpts(opts.YAxis{Type: "value", Name: "events"}),
		charts.WithTooltipOpts(opts.Tooltip{Trigger: "axis"}),
		charts.WithLegendOpts(opts.Legend{Top: "bottom"}),
	)
	for _, d := range drains {
		data := make([]opts.LineData, len(d.curve))
		for i, p := range d.curve {
			data[i] = opts.LineData{Value: []float64{round(p.at.Seconds(), 3), float64(p.stored)}}
		}
		line.AddSeries(d.name, data, charts.WithLineChartOpts(opts.LineChart{ShowSymbol: opts.Bool(false)}))
	}
	return line
}

// throughputChart compares, per backlog, the relay's drain with
// pg_recvlogical's read of the same backlog and JetStream's limit.
func (r *report) throughputChart() *charts.Bar {
	var names []string
	var relay, recv, limit []opts.BarData
	js := r.find("L2")
	for _, row := range r.rows {
		if row.kind != "R1" {
			continue
		}
		names = append(names, row.kind+" "+row.what)
		relay = append(relay, bar(row.rate()))
		recv = append(recv, barOf(row.vsRecv))
		limit = append(limit, barOf(js))
	}
	for _, c := range r.colds {
		names = append(names, "C1 "+c.label)
		relay = append(relay, bar(perSecond(c.events, c.lastStored)))
		recv = append(recv, bar(perSecond(c.events, c.recv)))
		limit = append(limit, bar(perSecond(c.events, c.limit)))
	}
	if len(names) == 0 {
		return nil
	}
	b := charts.NewBar()
	b.SetGlobalOptions(
		charts.WithInitializationOpts(chartSize()),
		charts.WithTitleOpts(opts.Title{Title: "Throughput", Subtitle: "events/s on the same backlog: the relay from its start, pg_recvlogical, JetStream storing alone"}),
		charts.WithYAxisOpts(opts.YAxis{Type: "value", Name: "events/s"}),
		charts.WithTooltipOpts(opts.Tooltip{Trigger: "axis"}),
		charts.WithLegendOpts(opts.Legend{Top: "bottom"}),
	)
	b.SetXAxis(names).
		AddSeries("relay", relay).
		AddSeries("pg_recvlogical", recv).
		AddSeries("JetStream limit", limit)
	return b
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
func (r *report) latencyChart() *charts.Bar {
	if len(r.latencies) == 0 {
		return nil
	}
	names := make([]string, len(latencyBuckets)+1)
	for i, d := range latencyBuckets {
		names[i] = "≤ " + ms(d)
	}
	names[len(latencyBuckets)] = "> " + ms(latencyBuckets[len(latencyBuckets)-1])
	b := charts.NewBar()
	b.SetGlobalOptions(
		charts.WithInitializationOpts(chartSize()),
		charts.WithTitleOpts(opts.Title{Title: "Latency, commit to stored", Subtitle: "share of events per bucket, one series per target rate"}),
		charts.WithYAxisOpts(opts.YAxis{Type: "value", Name: "% of events"}),
		charts.WithTooltipOpts(opts.Tooltip{Trigger: "axis"}),
		charts.WithLegendOpts(opts.Legend{Top: "bottom"}),
	)
	b.SetXAxis(names)
	for _, l := range r.latencies {
		shares := histogram(l.latencies)
		data := make([]opts.BarData, len(shares))
		for i, s := range shares {
			data[i] = bar(s)
		}
		b.AddSeries(fmt.Sprintf("%.0f/s", l.rate), data)
	}
	return b
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

func bar(v float64) opts.BarData { return opts.BarData{Value: round(v, 1)} }

func barOf(row *benchRow) opts.BarData {
	if row == nil {
		return opts.BarData{Value: nil}
	}
	return bar(row.rate())
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
