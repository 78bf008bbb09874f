package bench

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The pages quote the benchmark's figures from one report,
// docs/bench/report.json (bench --json), with a marker naming each
// figure's key in front of it:
//
//	<!--fig:c1.1row.vs_recv_x-->1.10×       a figure of the report, as rounded
//	<!--fig:commit-->4a07718               the commit the report measured
//	<!--set-->150 ms                       a setting, target or bound: not a measurement
//	<!--hist:f331d41--> … <!--/hist-->     figures measured at an older commit, kept because they explain a decision
//	<!--tables-->, then a fenced block     lines of the report's printed tables, verbatim
//
// HTML comments do not show on the rendered page.

// reportFile is the committed report, from the module root.
const reportFile = "docs/bench/report.json"

// figurePages are the pages, or their sections (a heading), where every
// quantity (a number with a unit: µs, ms, s, ×, %, /s, MiB, MB/s) must be
// a marked figure, a setting, historical, or code.
var figurePages = []struct{ page, section string }{
	{"README.md", "## Performance in one paragraph"},
	{"docs/performance.md", ""},
	{"docs/performance-drain.md", ""},
	{"docs/polling.md", "## Performance"},
	{"docs/scaling.md", ""},
}

// TestDocsQuoteTheReport fails when a page quotes a figure the committed
// report does not hold (another value, or no such key), when a quantity in
// a performance section carries no marker, and when the report is not a
// whole run of a committed tree.
func TestDocsQuoteTheReport(t *testing.T) {
	root := moduleRoot(t)
	rec, err := ReadRecord(filepath.Join(root, reportFile))
	if err != nil {
		t.Fatal(err)
	}
	checkRecord(t, root, rec)
	figures := quotable(rec)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(root, "README.md"))
	quoted := 0
	for _, path := range pages {
		rel, _ := filepath.Rel(root, path)
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		problems, n := checkPage(string(raw), rec, figures, sectionOf(rel))
		quoted += n
		for _, p := range problems {
			t.Errorf("%s:%s", rel, p)
		}
		for _, p := range checkHistory(root, string(raw)) {
			t.Errorf("%s: %s", rel, p)
		}
	}
	if quoted < 20 {
		t.Errorf("the pages quote %d figures of the report: the markers are not being read", quoted)
	}
}

// sectionOf returns the section of page whose quantities must be marked:
// "" for the whole page, nil when the page is not a performance page.
func sectionOf(page string) *string {
	for _, p := range figurePages {
		if p.page == page {
			return &p.section
		}
	}
	return nil
}

// checkRecord: the report is a whole run of a commit of this repository.
func checkRecord(t *testing.T, root string, rec Record) {
	t.Helper()
	if rec.Error != "" {
		t.Errorf("%s is the report of a run that failed (%s): run the benchmark again", reportFile, rec.Error)
	}
	if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(rec.Commit) {
		t.Errorf("%s measured commit %q: run it from a committed tree (go run ./cmd/outbox-relay bench --json %s)", reportFile, rec.Commit, reportFile)
	}
	if rec.Command == "" || rec.Machine.Cores == 0 || rec.Machine.CPUModel == "" || len(rec.Load.Samples) == 0 ||
		rec.Versions.Postgres == "" || rec.Versions.NATSServer == "" || rec.Versions.Go == "" || rec.Tables == "" {
		t.Errorf("%s lacks the command, machine, load, versions or tables", reportFile)
	}
	if err := gitKnows(root, rec.Commit); err != nil {
		t.Errorf("%s measured commit %s: %v", reportFile, rec.Commit, err)
	}
}

// quotable is the report's figures, with its load and machine.
func quotable(rec Record) map[string]float64 {
	f := map[string]float64{}
	for k, v := range rec.Figures {
		f[k] = v
	}
	f["load.min"], f["load.max"], f["load.mean"] = rec.Load.Min, rec.Load.Max, rec.Load.Mean
	f["load.start"], f["load.end"] = rec.Load.Start, rec.Load.End
	f["machine.cores"] = float64(rec.Machine.Cores)
	f["machine.memory_gib"] = float64(rec.Machine.MemoryBytes) / (1 << 30)
	f["run.minutes"] = rec.Finished.Sub(rec.Started).Minutes()
	return f
}

var (
	// figMarker is a quoted figure: its key, then the number as written.
	figMarker = regexp.MustCompile(`<!--fig:([a-z0-9_.]+)-->(-?[0-9][0-9,]*(?:\.[0-9]+)?)?`)
	// commitMarker is the measured commit, abbreviated.
	commitMarker = regexp.MustCompile(`<!--fig:commit-->([0-9a-f]*)`)
	setMarker    = regexp.MustCompile(`<!--set-->-?[0-9][0-9,]*(?:\.[0-9]+)?(?:\s?(?:–|-|to)\s?[0-9][0-9,]*(?:\.[0-9]+)?)?`)
	codeSpan     = regexp.MustCompile("`[^`]*`")
	histOpen     = regexp.MustCompile(`<!--hist:([^>]*)-->`)
	// quantity is a number with a unit, or a range of them ("5.6–9.2 µs",
	// "5.6–FIG µs" when only its end is marked).
	// figureCell is a table cell that holds only a number or a range,
	// its unit in the column's header.
	figureCell = regexp.MustCompile(`^\*{0,2}~?-?[0-9][0-9,]*(?:\.[0-9]+)?(?:\s?(?:–|-)\s?[0-9][0-9,]*(?:\.[0-9]+)?)?(?:\s?(?:µs|ms|s|×|%|/s|MiB|MB/s|KiB|B))?\*{0,2}$`)
	quantity   = regexp.MustCompile(`(?:^|[^\w.])(-?[0-9][0-9,]*(?:\.[0-9]+)?(?:\s?(?:–|-|to)\s?(?:[0-9][0-9,]*(?:\.[0-9]+)?|FIG))?\s?(?:µs|ms|s|×|%|/s|k/s|events/s|messages/s|commits/s|MiB|MB/s))(?:[^\w/]|$)`)
)

// checkPage returns the page's problems ("line: what") and how many
// figures it quotes. section is nil on a page whose unmarked quantities
// are not checked.
func checkPage(text string, rec Record, figures map[string]float64, section *string) (problems []string, quoted int) {
	inFence, inHist, tablesNext, inSection := false, false, false, section != nil && *section == ""
	var fence []string
	fail := func(line int, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%d: %s", line, fmt.Sprintf(format, args...)))
	}
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		if strings.HasPrefix(line, "```") {
			if inFence && fence != nil {
				if missing := notIn(fence, rec.Tables); missing != "" {
					fail(n, "the block after <!--tables--> is not the report's tables: %q is not a line of them", missing)
				}
				quoted++
			}
			if !inFence && tablesNext {
				fence = []string{}
			} else {
				fence = nil
			}
			inFence, tablesNext = !inFence, false
			continue
		}
		if inFence {
			if fence != nil {
				fence = append(fence, line)
			}
			continue
		}
		if strings.TrimSpace(line) == "<!--tables-->" {
			tablesNext = true
			continue
		}
		if section != nil && *section != "" && strings.HasPrefix(line, "#") {
			level := len(line) - len(strings.TrimLeft(line, "#"))
			switch {
			case line == *section:
				inSection = true
			case inSection && level <= len(*section)-len(strings.TrimLeft(*section, "#")):
				inSection = false
			}
		}
		// Markers written in code are examples of the syntax.
		line = codeSpan.ReplaceAllString(line, "CODE")
		for _, m := range commitMarker.FindAllStringSubmatch(line, -1) {
			quoted++
			if len(m[1]) < 7 || !strings.HasPrefix(rec.Commit, m[1]) {
				fail(n, "commit %q is not the report's (%s)", m[1], rec.Commit)
			}
		}
		line = commitMarker.ReplaceAllString(line, "FIG")
		for _, m := range figMarker.FindAllStringSubmatch(line, -1) {
			quoted++
			if p := checkFigure(m[1], m[2], figures); p != "" {
				fail(n, "%s", p)
			}
		}
		if !inSection {
			continue
		}
		// What is left to check: the line outside historical passages,
		// code, marked figures and settings.
		var open string
		for line != "" {
			if !inHist {
				if loc := histOpen.FindStringIndex(line); loc != nil {
					open, line, inHist = open+line[:loc[0]], line[loc[1]:], true
					continue
				}
				open, line = open+line, ""
				continue
			}
			if j := strings.Index(line, "<!--/hist-->"); j >= 0 {
				line, inHist = line[j+len("<!--/hist-->"):], false
				continue
			}
			line = ""
		}
		open = figMarker.ReplaceAllString(open, "FIG")
		open = setMarker.ReplaceAllString(open, "SET")
		for _, q := range unmarked(open) {
			fail(n, "%q carries no marker: quote it from %s (<!--fig:KEY-->), or mark it <!--set--> (a setting, target or count) or historical (<!--hist:COMMIT-->…<!--/hist-->)", q, reportFile)
		}
	}
	if inHist {
		problems = append(problems, "a <!--hist:…--> passage is not closed with <!--/hist-->")
	}
	return problems, quoted
}

// unmarked returns the quantities of a line (markers, code and history
// replaced): numbers with a unit, and table cells holding only a number.
func unmarked(line string) []string {
	var found []string
	for _, m := range quantity.FindAllStringSubmatch(line, -1) {
		found = append(found, m[1])
	}
	if strings.HasPrefix(strings.TrimSpace(line), "|") {
		for _, cell := range strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|") {
			cell = strings.TrimSpace(cell)
			if figureCell.MatchString(cell) && !quantity.MatchString(" "+cell) {
				found = append(found, cell)
			}
		}
	}
	return found
}

// checkFigure checks one quoted figure against the report: the number as
// written must be the report's value rounded to the digits shown.
func checkFigure(key, written string, figures map[string]float64) string {
	want, ok := figures[key]
	if !ok {
		return fmt.Sprintf("%s: the report holds no figure %s", reportFile, key)
	}
	if written == "" {
		return fmt.Sprintf("<!--fig:%s--> is not followed by a number (the report says %v)", key, want)
	}
	got, err := strconv.ParseFloat(strings.ReplaceAll(written, ",", ""), 64)
	if err != nil {
		return fmt.Sprintf("<!--fig:%s-->%s: %v", key, written, err)
	}
	digits := 0
	if i := strings.IndexByte(written, '.'); i >= 0 {
		digits = len(written) - i - 1
	}
	if math.Abs(got-want) > 0.5*math.Pow(10, -float64(digits))+1e-9 {
		return fmt.Sprintf("%s is quoted as %s, the report says %s", key, written, strconv.FormatFloat(want, 'f', -1, 64))
	}
	return ""
}

// notIn returns the first of lines (trailing spaces aside) that is not a
// line of tables, in order; "" when they all are, as one run of lines.
func notIn(lines []string, tables string) string {
	have := strings.Split(tables, "\n")
	for i := range have {
		have[i] = strings.TrimRight(have[i], " ")
	}
	start := -1
	for i, l := range have {
		if len(lines) > 0 && l == strings.TrimRight(lines[0], " ") {
			start = i
			break
		}
	}
	if len(lines) == 0 {
		return ""
	}
	if start < 0 {
		return lines[0]
	}
	for j, l := range lines {
		if start+j >= len(have) || have[start+j] != strings.TrimRight(l, " ") {
			return l
		}
	}
	return ""
}

// checkHistory: each historical passage names a commit of this repository.
func checkHistory(root, text string) []string {
	var problems []string
	for _, m := range histOpen.FindAllStringSubmatch(codeSpan.ReplaceAllString(text, "CODE"), -1) {
		if err := gitKnows(root, m[1]); err != nil {
			problems = append(problems, fmt.Sprintf("<!--hist:%s-->: %v", m[1], err))
		}
	}
	return problems
}

// gitKnows checks that commit is a commit id and, in a full clone, a
// commit of the repository at root (a shallow clone, or a tree without
// git, lacks the history to tell).
func gitKnows(root, commit string) error {
	if !regexp.MustCompile(`^[0-9a-f]{7,40}$`).MatchString(commit) {
		return fmt.Errorf("%q is not a commit id", commit)
	}
	shallow, err := exec.Command("git", "-C", root, "rev-parse", "--is-shallow-repository").Output()
	if err != nil || strings.TrimSpace(string(shallow)) != "false" {
		return nil
	}
	out, err := exec.Command("git", "-C", root, "cat-file", "-t", commit).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "commit" {
		return fmt.Errorf("git cat-file -t %s: %s %v", commit, strings.TrimSpace(string(out)), err)
	}
	return nil
}

// moduleRoot is the directory of go.mod above the test's directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// TestCheckPage: the checker finds a figure quoted with another value, an
// unknown key, a quantity without a marker (also half of a range), a
// table that is not the report's, an unclosed historical passage; and
// passes what is marked.
func TestCheckPage(t *testing.T) {
	rec := Record{Commit: "4a07718aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", Tables: "Throughput\n  L2  50,399  \n  R1  34,559\n"}
	figures := map[string]float64{"r1.1row.vs_recv_x": 1.5401, "r1.1row.rate_per_s": 34559.2, "c1.1row.relay_us": 9.25}
	whole := ""
	for _, tc := range []struct {
		name, page string
		want       []string
	}{
		{name: "marked", page: "The relay drains at <!--fig:r1.1row.rate_per_s-->34,559 events/s, <!--fig:r1.1row.vs_recv_x-->1.54× " +
			"(<!--fig:r1.1row.vs_recv_x-->1.5×), <!--fig:c1.1row.relay_us-->9.2–<!--fig:c1.1row.relay_us-->9.3 µs per event, " +
			"at commit <!--fig:commit-->4a07718; a `--linger 20 ms` and a <!--set-->150 ms target."},
		{name: "wrong value", page: "<!--fig:r1.1row.vs_recv_x-->1.55×", want: []string{"1: r1.1row.vs_recv_x is quoted as 1.55, the report says 1.5401"}},
		{name: "unknown key", page: "<!--fig:r9.rate_per_s-->3/s", want: []string{"1: docs/bench/report.json: the report holds no figure r9.rate_per_s"}},
		{name: "unmarked", page: "it spends 6–10 µs per event, and 70 ms to start", want: []string{`1: "6–10 µs" carries no marker`, `1: "70 ms" carries no marker`}},
		{name: "half a range", page: "5.6–<!--fig:c1.1row.relay_us-->9.2 µs", want: []string{`1: "5.6–FIG µs" carries no marker`}},
		{name: "historical", page: "before: <!--hist:f331d41-->94 ms, 59–128 ms<!--/hist--> after 3 ms", want: []string{`1: "3 ms" carries no marker`}},
		{name: "unclosed", page: "<!--hist:f331d41-->94 ms\n\n99 ms", want: []string{"a <!--hist:…--> passage is not closed"}},
		{name: "commit", page: "<!--fig:commit-->f331d41", want: []string{`1: commit "f331d41" is not the report's`}},
		{name: "tables", page: "<!--tables-->\n```\n  L2  50,399\n  R1  34,559\n```"},
		{name: "tables edited", page: "<!--tables-->\n```\n  L2  50,399\n  R1  34,999\n```", want: []string{`5: the block after <!--tables--> is not the report's tables: "  R1  34,999"`}},
		{name: "code", page: "```sh\nbench --duration 10s\n```\n"},
		{name: "syntax in code", page: "write `<!--fig:r1.1row.vs_recv_x-->1.9×` or `<!--hist:COMMIT-->`, then 3 ms", want: []string{`1: "3 ms" carries no marker`}},
		{name: "setting range", page: "a timeout of <!--set-->2–5 s"},
		{name: "table", page: "| case | events/s | first PubAck |\n|---|---|---|\n| 1-row | 39,878 | <!--fig:c1.1row.relay_us-->9.2 ms |\n| 10-row | <!--set-->3 | **1.10×** |",
			want: []string{`3: "39,878" carries no marker`, `4: "1.10×" carries no marker`}},
	} {
		problems, _ := checkPage(tc.page, rec, figures, &whole)
		if len(problems) != len(tc.want) {
			t.Errorf("%s: problems %q, want %q", tc.name, problems, tc.want)
			continue
		}
		for i, p := range problems {
			if !strings.Contains(p, tc.want[i]) {
				t.Errorf("%s: problem %q, want %q", tc.name, p, tc.want[i])
			}
		}
	}
	section := "## Performance"
	page := "## Setup\n\nwithin 20 ms\n\n## Performance\n\n70 ms\n\n### Detail\n\n80 ms\n\n## Next\n\n90 ms\n"
	problems, _ := checkPage(page, rec, figures, &section)
	if len(problems) != 2 || !strings.HasPrefix(problems[0], "7:") || !strings.HasPrefix(problems[1], "11:") {
		t.Errorf("section check: %q, want lines 7 and 11 only", problems)
	}
}
