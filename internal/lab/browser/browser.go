// Package browser is test support: it opens a page in a real headless
// Chromium (Debian's chromium package, driven over the DevTools protocol
// with chromedp) and measures what a person would see, so that a test can
// tell a page that draws from one that stays blank. Only tests import it.
//
// Chromium is found as $OUTBOX_TEST_CHROMIUM or chromium on PATH; without
// it Charts fails the test (never skips it) and says how to install it.
// It runs with the flags that work on a machine without a network: no
// sandbox (the tests run as root), no GPU, no background networking, a
// fresh profile per call.
package browser

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// Page is what Charts saw of a page.
type Page struct {
	// URL is the page's own address.
	URL string
	// Charts are the page's figure.chart elements, in document order.
	Charts []Chart
	// Requests are the URLs the page asked for, itself included: a page
	// that works offline asks for nothing else.
	Requests []string
	// Screenshot is the whole page as the browser drew it (PNG).
	Screenshot []byte
}

// Chart is one figure.chart: its svg's size on the page and, for each
// element of class series, its size and how many pixels of its
// data-color the browser painted inside the chart's plot area (the
// element of class plot), which the legend is outside of.
type Chart struct {
	ID, Title     string
	Width, Height float64
	Series        []Series
}

// Series is one series of a chart.
type Series struct {
	Name, Color   string
	Width, Height float64
	Pixels        int
}

// Chromium returns the Chromium executable, or fails t saying how to get
// one.
func Chromium(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("OUTBOX_TEST_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium: the report test draws the page in a real browser; install Debian's chromium package (apt-get install -y chromium, as .ci/run does) or set OUTBOX_TEST_CHROMIUM to a Chromium executable")
	return ""
}

// profileDir returns a fresh, empty profile directory, removed when t
// ends. Not t.TempDir: Chromium's helper processes can still write there
// for a moment after the browser exits, and t.TempDir's cleanup would
// fail the test for it; this one tries again for a few seconds.
func profileDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "outbox-relay-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := os.RemoveAll(dir)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Logf("Chromium's profile %s is left behind: %v", dir, err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return dir
}

// measureJS reads the charts' geometry, in page coordinates.
const measureJS = `(() => {
  const box = e => { const r = e.getBoundingClientRect(); return {x: r.x + scrollX, y: r.y + scrollY, w: r.width, h: r.height}; };
  return [...document.querySelectorAll('figure.chart')].map(f => {
    const svg = f.querySelector('svg'), plot = f.querySelector('.plot');
    return {id: f.id, title: f.dataset.title || '',
      svg: svg ? box(svg) : null, plot: plot ? box(plot) : null,
      series: [...f.querySelectorAll('.series')].map(s => ({name: s.dataset.name || '', color: s.dataset.color || '', box: box(s)}))};
  });
})()`

type rect struct{ X, Y, W, H float64 }

type measured struct {
	ID, Title string
	SVG, Plot *rect
	Series    []struct {
		Name, Color string
		Box         rect
	}
}

// Charts opens the HTML file at path in Chromium, as file:// (the way a
// person opens a report they were sent), waits for it to load, and
// measures its charts on a screenshot of the whole page.
func Charts(t testing.TB, path string) Page {
	t.Helper()
	exe := Chromium(t)
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	pageURL := (&url.URL{Scheme: "file", Path: abs}).String()

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exe),
		chromedp.UserDataDir(profileDir(t)),
		chromedp.Headless, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.DisableGPU, chromedp.NoSandbox,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 1024),
	)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	defer cancel()

	var mu sync.Mutex
	var requests []string
	start := time.Now()
	// The first Run starts the browser; it must not have a deadline of its
	// own (chromedp.Run's rule), so the deadline is on the steps after it.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start Chromium (%s): %v", exe, err)
	}
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			mu.Lock()
			requests = append(requests, e.Request.URL)
			mu.Unlock()
		}
	}); err != nil {
		t.Fatalf("listen to the page's requests: %v", err)
	}
	steps, cancelSteps := context.WithTimeout(ctx, 60*time.Second)
	defer cancelSteps()
	if err := chromedp.Do(steps, chromedp.EmulateViewport(1280, 1024), chromedp.Navigate(pageURL)); err != nil {
		t.Fatalf("load %s in Chromium: %v", pageURL, err)
	}
	charts, err := chromedp.Run(steps, chromedp.Evaluate[[]measured](measureJS))
	if err != nil {
		t.Fatalf("measure the charts of %s: %v", pageURL, err)
	}
	shot, err := chromedp.Run(steps, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", pageURL, err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("read the screenshot: %v", err)
	}
	t.Logf("Chromium drew %s in %s", path, time.Since(start).Round(time.Millisecond))

	mu.Lock()
	p := Page{URL: pageURL, Requests: append([]string(nil), requests...), Screenshot: shot}
	mu.Unlock()
	for _, m := range charts {
		c := Chart{ID: m.ID, Title: m.Title}
		if m.SVG != nil {
			c.Width, c.Height = m.SVG.W, m.SVG.H
		}
		for _, s := range m.Series {
			painted := 0
			if m.Plot != nil {
				painted = countColor(img, *m.Plot, s.Color)
			}
			c.Series = append(c.Series, Series{Name: s.Name, Color: s.Color, Width: s.Box.W, Height: s.Box.H, Pixels: painted})
		}
		p.Charts = append(p.Charts, c)
	}
	return p
}

// Problems lists what a person would miss on the page: no chart, a chart
// of no size or without series, a series the browser painted fewer than
// minPixels pixels of in its plot area, a request for anything but the
// page itself (which offline would fail).
func (p Page) Problems(minPixels int) []string {
	var out []string
	if len(p.Charts) == 0 {
		out = append(out, "the page has no chart")
	}
	for _, c := range p.Charts {
		if c.Width <= 0 || c.Height <= 0 {
			out = append(out, fmt.Sprintf("chart %q is %gx%g", c.Title, c.Width, c.Height))
		}
		if len(c.Series) == 0 {
			out = append(out, fmt.Sprintf("chart %q has no series", c.Title))
		}
		for _, s := range c.Series {
			if s.Pixels < minPixels || s.Width <= 0 || s.Height <= 0 {
				out = append(out, fmt.Sprintf("chart %q, series %q: %d pixels of %s painted in the plot area (want %d or more), element %gx%g",
					c.Title, s.Name, s.Pixels, s.Color, minPixels, s.Width, s.Height))
			}
		}
	}
	for _, r := range p.Requests {
		if r != p.URL {
			out = append(out, "the page requested "+r+": offline, that fails")
		}
	}
	return out
}

// countColor counts the pixels of img inside r whose color is hex
// (#rrggbb), give or take 3 per channel.
func countColor(img image.Image, r rect, hex string) int {
	want, err := parseHex(hex)
	if err != nil {
		return 0
	}
	b := img.Bounds()
	x0, y0 := max(int(r.X), b.Min.X), max(int(r.Y), b.Min.Y)
	x1, y1 := min(int(r.X+r.W), b.Max.X), min(int(r.Y+r.H), b.Max.Y)
	n := 0
	for y := y0; y < y1; y++ {
		for x := x0; x < x1; x++ {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			if near(cr>>8, want[0]) && near(cg>>8, want[1]) && near(cb>>8, want[2]) {
				n++
			}
		}
	}
	return n
}

func near(a, b uint32) bool { return a+3 >= b && b+3 >= a }

func parseHex(hex string) ([3]uint32, error) {
	if len(hex) != 7 || hex[0] != '#' {
		return [3]uint32{}, fmt.Errorf("color %q: want #rrggbb", hex)
	}
	var c [3]uint32
	for i := range c {
		v, err := strconv.ParseUint(hex[1+2*i:3+2*i], 16, 8)
		if err != nil {
			return [3]uint32{}, fmt.Errorf("color %q: %w", hex, err)
		}
		c[i] = uint32(v)
	}
	return c, nil
}
