package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// The files shipped for operators, relative to this package.
const (
	alertsFile    = "../../deploy/prometheus/alerts.yml"
	dashboardFile = "../../deploy/grafana/outbox-relay.json"
)

// notFromTheRelay are series Prometheus makes itself, not scraped.
var notFromTheRelay = map[string]bool{"up": true}

// TestDeployRulesAndDashboard: the alert rules pass Prometheus's own rule
// parser, every dashboard query is PromQL the Prometheus parser accepts,
// and every metric the rules and the dashboard name is served by a live
// relay that published events and one dead letter (so the labelled series
// exist) with max_slot_wal_keep_size set (so safe_wal_size exists).
func TestDeployRulesAndDashboard(t *testing.T) {
	p := parser.NewParser(parser.Options{})
	used := map[string][]string{} // metric name -> where it is used
	for where, expr := range alertExprs(t, p) {
		addNames(t, p, used, where, expr)
	}
	for where, expr := range dashboardExprs(t) {
		addNames(t, p, used, where, expr)
	}
	if len(used) < 10 {
		t.Fatalf("only %d metric names found in the rules and the dashboard: %v", len(used), used)
	}

	env := suite.NewEnv(t)
	keepWAL(t, env)
	env.Exec(`ALTER TABLE outbox_events ALTER COLUMN payload DROP NOT NULL`)
	// A slot another relay recorded, that nothing streams from: the idle
	// slots' gauge has a series.
	idle := env.Slot + "_idle"
	env.Exec(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, idle)
	env.Exec(`INSERT INTO outbox_relay_slots (slot_name, created_lsn, confirm_limit, bootstrapped_at, outbox_table)
		VALUES ($1, '0/0', '0/0', now(), 'public.outbox2')`, idle)
	relay := suite.StartRelay(t, env)
	relay.WaitLog("streaming from the slot", 30*time.Second)
	env.Tx(relaytest.NewRow("order", "1", "created", `{}`), relaytest.NewRow("order", "1", "paid", `{}`))
	env.Tx(relaytest.NewRow("order", "2", "created", `{}`))
	env.Exec(`INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '3', 'broken', NULL)`)
	env.WaitStored(4, 30*time.Second)

	// The slot monitor and the dead-letter count are sampled periodically:
	// wait for both to have seen this state.
	var served map[string]bool
	deadline := time.Now().Add(45 * time.Second)
	for {
		families := scrape(t, relay)
		served = seriesNames(families)
		if value(families, "outbox_relay_dead_letters") == 1 && served["outbox_relay_slot_safe_wal_size_bytes"] &&
			value(families, "outbox_events_published_total") == 3 && served["outbox_relay_idle_slot_retained_bytes"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: dead letters %v, published %v, safe_wal_size served %v, idle slots served %v",
				45*time.Second, value(families, "outbox_relay_dead_letters"), value(families, "outbox_events_published_total"),
				served["outbox_relay_slot_safe_wal_size_bytes"], served["outbox_relay_idle_slot_retained_bytes"])
		}
		time.Sleep(250 * time.Millisecond)
	}
	// What WAL mode means by the article's names (docs/metrics.md): three
	// transactions are three batches; the dead letter failed, the others
	// were published, each with its commit-to-stored latency; nothing waits.
	families := scrape(t, relay)
	for name, want := range map[string]float64{
		"outbox_events_pending":                   0,
		"outbox_relay_oldest_pending_age_seconds": 0,
		"outbox_events_failed_total":              1,
		"outbox_batch_duration_seconds":           3,
		"outbox_relay_commit_to_stored_seconds":   3,
	} {
		if got := value(families, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := labelOf(families, "outbox_events_failed_total", "event_type"); got != "broken" {
		t.Errorf("outbox_events_failed_total{event_type=%q}, want the dead letter's type", got)
	}
	if got := labelOf(families, "outbox_relay_idle_slot_retained_bytes", "slot"); got != idle {
		t.Errorf("outbox_relay_idle_slot_retained_bytes{slot=%q}, want the idle slot %q with the WAL it keeps", got, idle)
	}
	retained, safe := value(families, "outbox_relay_slot_retained_wal_bytes"), value(families, "outbox_relay_slot_safe_wal_size_bytes")
	if retained <= 0 || safe <= 0 {
		t.Errorf("retained WAL %v bytes, safe_wal_size %v bytes", retained, safe)
	}

	var missing []string
	for name, where := range used {
		if !served[name] && !notFromTheRelay[name] {
			missing = append(missing, fmt.Sprintf("%s (used by %s)", name, strings.Join(where, ", ")))
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("not in the relay's /metrics: %s", m)
	}
	if len(missing) == 0 {
		t.Logf("%d metric names used by the rules and the dashboard, all served", len(used))
	}
}

// alertExprs parses the rules file with Prometheus's rule parser (what
// `promtool check rules` runs) and returns each rule's expression.
func alertExprs(t *testing.T, p parser.Parser) map[string]string {
	t.Helper()
	groups, errs := rulefmt.ParseFile(alertsFile, false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("%s: %v", alertsFile, err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	exprs := map[string]string{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("%s: group %s has a rule that is not an alert: %q", alertsFile, g.Name, r.Record)
			}
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("%s: alert %s lacks a severity label or a summary", alertsFile, r.Alert)
			}
			exprs["alert "+r.Alert] = r.Expr
		}
	}
	return exprs
}

// grafanaVar matches Grafana's interval variables, which stand where
// PromQL wants a duration.
var grafanaVar = regexp.MustCompile(`\$__(rate_interval|interval|range)\b`)

// labelValues matches a Grafana label_values(metric{...}, label) query.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*\w+\)$`)

// dashboardExprs reads every query of the dashboard: panel targets and
// the query variables.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr  string `json:"expr"`
				RefID string `json:"refId"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if dash.UID == "" {
		t.Errorf("%s: no uid", dashboardFile)
	}
	exprs := map[string]string{}
	for _, panel := range dash.Panels {
		if panel.Type != "row" && len(panel.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", dashboardFile, panel.Title)
		}
		for _, target := range panel.Targets {
			exprs[fmt.Sprintf("panel %q %s", panel.Title, target.RefID)] = grafanaVar.ReplaceAllString(target.Expr, "5m")
		}
	}
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		text, _ := q["query"].(string)
		m := labelValues.FindStringSubmatch(text)
		if m == nil {
			t.Errorf("%s: variable %s: query %q is not label_values(metric, label)", dashboardFile, v.Name, text)
			continue
		}
		exprs["variable "+v.Name] = m[1]
	}
	return exprs
}

// addNames parses expr and records the metric names its selectors name.
func addNames(t *testing.T, p parser.Parser, used map[string][]string, where, expr string) {
	t.Helper()
	e, err := p.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %q: %v", where, expr, err)
		return
	}
	names := metricNames(e)
	if len(names) == 0 {
		t.Errorf("%s: %q names no metric", where, expr)
	}
	for _, n := range names {
		if !slices.Contains(used[n], where) {
			used[n] = append(used[n], where)
		}
	}
}

// metricNames returns the metric names the vector and matrix selectors of
// e select, from the syntax tree.
func metricNames(e parser.Expr) []string {
	var names []string
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name != "" {
			names = append(names, name)
		}
		return nil
	})
	return names
}

// scrape reads the relay's /metrics with Prometheus's text parser.
func scrape(t *testing.T, r *relaytest.Relay) map[string]*dto.MetricFamily {
	t.Helper()
	body, err := r.Scrape()
	if err != nil {
		t.Fatal(err)
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	families, err := tp.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return families
}

// seriesNames returns the names of the series the families expose, as a
// query sees them: a histogram's _bucket, _sum and _count, a summary's
// _sum and _count. A family without a sample exposes none.
func seriesNames(families map[string]*dto.MetricFamily) map[string]bool {
	names := map[string]bool{}
	for name, f := range families {
		if len(f.GetMetric()) == 0 {
			continue
		}
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			names[name], names[name+"_sum"], names[name+"_count"] = true, true, true
		default:
			names[name] = true
		}
	}
	return names
}

// value returns the sum of a family's counter or gauge samples, or of its
// histograms' sample counts; -1 when it has none.
func value(families map[string]*dto.MetricFamily, name string) float64 {
	f, ok := families[name]
	if !ok || len(f.GetMetric()) == 0 {
		return -1
	}
	sum := 0.0
	for _, m := range f.GetMetric() {
		sum += m.GetGauge().GetValue() + m.GetCounter().GetValue() + m.GetUntyped().GetValue() + float64(m.GetHistogram().GetSampleCount())
	}
	return sum
}

// labelOf returns the label of the family's series whose value is not
// zero ("" when none).
func labelOf(families map[string]*dto.MetricFamily, name, label string) string {
	for _, m := range families[name].GetMetric() {
		if m.GetCounter().GetValue() == 0 && m.GetGauge().GetValue() == 0 {
			continue
		}
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				return l.GetValue()
			}
		}
	}
	return ""
}

// keepWAL sets max_slot_wal_keep_size, without which Postgres reports no
// safe_wal_size, for the test's duration, unless the server has a limit.
func keepWAL(t *testing.T, env *relaytest.Env) {
	t.Helper()
	var current string
	if err := env.Pool.QueryRow(context.Background(), `SHOW max_slot_wal_keep_size`).Scan(&current); err != nil {
		t.Fatal(err)
	}
	if current != "-1" {
		return
	}
	env.Exec(`ALTER SYSTEM SET max_slot_wal_keep_size = '1GB'`)
	env.Exec(`SELECT pg_reload_conf()`)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := env.Pool.Exec(ctx, `ALTER SYSTEM RESET max_slot_wal_keep_size`); err == nil {
			_, _ = env.Pool.Exec(ctx, `SELECT pg_reload_conf()`)
		}
	})
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
