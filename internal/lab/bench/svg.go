package bench

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
)

// chart is one chart of the HTML report, drawn by the binary as inline
// SVG: a line chart (numeric x, a polyline per series) when categories is
// nil, else a bar chart (a group of bars per category, one per series).
type chart struct {
	id, title, subtitle string
	xName, yName        string
	categories          []string
	series              []series
}

// series is one line or one set of bars. A line's points are (x, y); a
// bar series has one point per category, (category index, value), with
// NaN for a value it lacks.
type series struct {
	name   string
	points [][2]float64
}

// palette is ECharts' default, so the report looks as it did when
// go-echarts drew it. The tests find each series by its color.
var palette = []string{"#5470c6", "#91cc75", "#fac858", "#ee6666", "#73c0de", "#3ba272", "#fc8452", "#9a60b4", "#ea7ccc"}

func seriesColor(i int) string { return palette[i%len(palette)] }

// The chart's geometry, in SVG user units (CSS pixels at scale 1).
const (
	chartWidth  = 1100
	chartHeight = 520
	plotLeft    = 90
	plotRight   = chartWidth - 30
	plotTop     = 80
	fontSize    = 12
	// charWidth is the assumed width of a character of the axis font, to
	// wrap category labels and lay out the legend; generous for
	// sans-serif.
	charWidth = 0.6 * fontSize
	textColor = "#6e7079"
	gridColor = "#e0e6f1"
)

// svg writes the chart as an <svg> element. Elements the tests read have
// classes: the plot area (plot) and each series (series, with data-name
// and data-color).
func (c *chart) svg(b *strings.Builder) {
	legend := c.legendLayout()
	labels, lines := c.xLabelLines()
	plotBottom := chartHeight - 16 - 20*legend.rows - (fontSize+3)*lines - 28
	p := plot{left: plotLeft, right: plotRight, top: plotTop, bottom: float64(plotBottom)}
	p.yMax, p.yStep = niceScale(c.maxY())
	if c.categories == nil {
		p.xMax, p.xStep = niceScale(c.maxX())
	}

	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="sans-serif" font-size="%d" role="img" aria-label="%s">`+"\n",
		chartWidth, chartHeight, chartWidth, chartHeight, fontSize, esc(c.title))
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", chartWidth, chartHeight)
	fmt.Fprintf(b, `<text x="%d" y="28" font-size="18" font-weight="bold" fill="#464646">%s</text>`+"\n", plotLeft-60, esc(c.title))
	fmt.Fprintf(b, `<text x="%d" y="50" fill="%s">%s</text>`+"\n", plotLeft-60, textColor, esc(c.subtitle))
	c.yAxis(b, p)
	if c.categories == nil {
		c.xValueAxis(b, p)
	} else {
		c.xCategoryAxis(b, p, labels)
	}
	fmt.Fprintf(b, `<rect class="plot" x="%s" y="%s" width="%s" height="%s" fill="none"/>`+"\n", num(p.left), num(p.top), num(p.right-p.left), num(p.bottom-p.top))
	for i, s := range c.series {
		fmt.Fprintf(b, `<g class="series" data-name="%s" data-color="%s">`, esc(s.name), seriesColor(i))
		if c.categories == nil {
			c.line(b, p, s, seriesColor(i))
		} else {
			c.bars(b, p, i, s, seriesColor(i))
		}
		b.WriteString("</g>\n")
	}
	c.legend(b, legend, chartHeight-12-20*legend.rows)
	b.WriteString("</svg>\n")
}

// plot maps data to the plot area.
type plot struct {
	left, right, top, bottom float64
	xMax, xStep, yMax, yStep float64
}

func (p plot) x(v float64) float64 { return p.left + (p.right-p.left)*v/p.xMax }
func (p plot) y(v float64) float64 { return p.bottom - (p.bottom-p.top)*v/p.yMax }

func (c *chart) yAxis(b *strings.Builder, p plot) {
	for k := 0; float64(k)*p.yStep <= p.yMax*(1+1e-9); k++ {
		v := float64(k) * p.yStep
		y := p.y(v)
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s"/>`, num(p.left), num(y), num(p.right), num(y), gridColor)
		fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="end" dominant-baseline="middle" fill="%s">%s</text>`+"\n", num(p.left-8), num(y), textColor, tick(v, p.yStep))
	}
	fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="middle" fill="%s">%s</text>`+"\n", num(p.left), num(p.top-14), textColor, esc(c.yName))
}

func (c *chart) xValueAxis(b *strings.Builder, p plot) {
	fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s"/>`+"\n", num(p.left), num(p.bottom), num(p.right), num(p.bottom), textColor)
	for k := 0; float64(k)*p.xStep <= p.xMax*(1+1e-9); k++ {
		v := float64(k) * p.xStep
		x := p.x(v)
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s"/>`, num(x), num(p.bottom), num(x), num(p.bottom+5), textColor)
		fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="middle" fill="%s">%s</text>`+"\n", num(x), num(p.bottom+8+fontSize), textColor, tick(v, p.xStep))
	}
	fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="end" fill="%s">%s</text>`+"\n", num(p.right), num(p.bottom+2*fontSize+14), textColor, esc(c.xName))
}

func (c *chart) xCategoryAxis(b *strings.Builder, p plot, labels [][]string) {
	fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s"/>`+"\n", num(p.left), num(p.bottom), num(p.right), num(p.bottom), textColor)
	band := (p.right - p.left) / float64(len(c.categories))
	for i := range c.categories {
		x := p.left + band*(float64(i)+0.5)
		fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="middle" fill="%s">`, num(x), num(p.bottom+8+fontSize), textColor)
		for j, line := range labels[i] {
			dy := 0
			if j > 0 {
				dy = fontSize + 3
			}
			fmt.Fprintf(b, `<tspan x="%s" dy="%d">%s</tspan>`, num(x), dy, esc(line))
		}
		b.WriteString("</text>\n")
	}
}

// line draws s as a polyline; its tooltip is the series' name.
func (c *chart) line(b *strings.Builder, p plot, s series, color string) {
	pts := make([]string, 0, len(s.points))
	for _, pt := range s.points {
		if math.IsNaN(pt[1]) {
			continue
		}
		pts = append(pts, num(p.x(pt[0]))+","+num(p.y(pt[1])))
	}
	fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2.5" stroke-linejoin="round" points="%s"><title>%s</title></polyline>`,
		color, strings.Join(pts, " "), esc(s.name))
}

// bars draws the i-th of the chart's bar series: its bar in each
// category's group, with the value as its tooltip.
func (c *chart) bars(b *strings.Builder, p plot, i int, s series, color string) {
	band := (p.right - p.left) / float64(len(c.categories))
	width := band * 0.7 / float64(len(c.series))
	for _, pt := range s.points {
		cat, v := int(pt[0]), pt[1]
		if math.IsNaN(v) || cat < 0 || cat >= len(c.categories) {
			continue
		}
		x := p.left + band*float64(cat) + band*0.15 + width*float64(i)
		y := p.y(v)
		fmt.Fprintf(b, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s, %s: %s %s</title></rect>`,
			num(x), num(y), num(width*0.92), num(p.bottom-y), color, esc(s.name), esc(c.categories[cat]), value(v), esc(c.yName))
	}
}

// legendLayout places the series' names in rows across the chart.
type legendItem struct {
	x   float64
	row int
}

type legendPlan struct {
	items []legendItem
	rows  int
}

func (c *chart) legendLayout() legendPlan {
	var plan legendPlan
	x, row := 40.0, 0
	for _, s := range c.series {
		w := 22 + charWidth*float64(len([]rune(s.name))) + 24
		if x+w > chartWidth-40 && x > 40 {
			x, row = 40, row+1
		}
		plan.items = append(plan.items, legendItem{x: x, row: row})
		x += w
	}
	plan.rows = row + 1
	return plan
}

func (c *chart) legend(b *strings.Builder, plan legendPlan, top int) {
	b.WriteString(`<g class="legend">`)
	for i, s := range c.series {
		it := plan.items[i]
		y := float64(top + 20*it.row)
		fmt.Fprintf(b, `<rect x="%s" y="%s" width="16" height="10" rx="2" fill="%s"/>`, num(it.x), num(y-9), seriesColor(i))
		fmt.Fprintf(b, `<text x="%s" y="%s" fill="#333333">%s</text>`, num(it.x+22), num(y), esc(s.name))
	}
	b.WriteString("</g>\n")
}

// xLabelLines wraps the category labels to their band's width, at most
// three lines each, and says how many lines the x axis takes: the most
// of any label, or for a line chart one of tick labels and one for the
// axis's name.
func (c *chart) xLabelLines() (labels [][]string, lines int) {
	if c.categories == nil {
		return nil, 2
	}
	band := float64(plotRight-plotLeft) / float64(len(c.categories))
	perLine := max(int(band/charWidth)-1, 4)
	lines = 1
	for _, label := range c.categories {
		l := wrap(label, perLine, 3)
		lines = max(lines, len(l))
		labels = append(labels, l)
	}
	return labels, lines
}

// wrap splits s at spaces into lines of at most n runes (a longer word
// stays whole), at most maxLines, the last one cut with an ellipsis.
func wrap(s string, n, maxLines int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case len([]rune(line))+1+len([]rune(word)) <= n:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	lines = append(lines, line)
	if len(lines) > maxLines {
		lines = append(lines[:maxLines-1], strings.Join(lines[maxLines-1:], " "))
		if r := []rune(lines[maxLines-1]); len(r) > n {
			lines[maxLines-1] = string(r[:n-1]) + "…"
		}
	}
	return lines
}

func (c *chart) maxY() float64 {
	m := 0.0
	for _, s := range c.series {
		for _, pt := range s.points {
			if !math.IsNaN(pt[1]) {
				m = max(m, pt[1])
			}
		}
	}
	return m
}

func (c *chart) maxX() float64 {
	m := 0.0
	for _, s := range c.series {
		for _, pt := range s.points {
			m = max(m, pt[0])
		}
	}
	return m
}

// niceScale returns an axis maximum at or above v and a step of 1, 2 or 5
// times a power of ten that divides it in five or fewer.
func niceScale(v float64) (top, step float64) {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1, 0.2
	}
	raw := v / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step = 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	return math.Ceil(v/step-1e-9) * step, step
}

// tick formats an axis value with as many decimals as step has,
// thousands separated.
func tick(v, step float64) string {
	if step >= 1 {
		return thousands(v)
	}
	decimals := len(strconv.FormatFloat(step, 'f', -1, 64)) - len("0.")
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// value formats a data value for a tooltip.
func value(v float64) string {
	if v >= 1000 {
		return thousands(v)
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// num formats an SVG coordinate.
func num(v float64) string { return strconv.FormatFloat(round(v, 1), 'f', -1, 64) }

func esc(s string) string { return html.EscapeString(s) }
