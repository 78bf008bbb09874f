package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/outbox-relay/outbox-relay/contract"
)

// parseRun parses a run command line as the CLI does, with env set.
func parseRun(t *testing.T, env map[string]string, args ...string) (*runCmd, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	var c runOnlyCLI
	p, err := kong.New(&c, vars())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Parse(append([]string{"run"}, args...)); err != nil {
		return nil, err
	}
	return &c.Run, nil
}

// TestTableFlags: --table may be given several times, OUTBOX_TABLE may
// list several comma-separated, a flag replaces the variable and the
// default; the first table is the relay's Table, the rest MoreTables;
// a table named twice and polling several tables are refused with what
// to do.
func TestTableFlags(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"default", nil, nil, []string{"public.outbox_events"}},
		{"flag repeated", nil, []string{"--table", "a", "--table", "shop.b"}, []string{"public.a", "shop.b"}},
		{"flag comma-separated", nil, []string{"--table", "a,shop.b"}, []string{"public.a", "shop.b"}},
		{"variable", map[string]string{"OUTBOX_TABLE": "shop.b, public.a"}, nil, []string{"shop.b", "public.a"}},
		{"flag over variable", map[string]string{"OUTBOX_TABLE": "shop.b,public.a"}, []string{"--table", "c"}, []string{"public.c"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			run, err := parseRun(t, c.env, c.args...)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := run.config()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, tb := range cfg.Tables() {
				got = append(got, tb.String())
			}
			if !slices.Equal(got, c.want) || cfg.Table.String() != c.want[0] || len(cfg.MoreTables) != len(c.want)-1 {
				t.Errorf("tables %v (Table %s, %d more), want %v", got, cfg.Table, len(cfg.MoreTables), c.want)
			}
		})
	}
	run, err := parseRun(t, nil, "--table", "a", "--table", "public.a")
	if err == nil {
		_, err = run.config()
	}
	if err == nil || !strings.Contains(err.Error(), "named twice") {
		t.Errorf("a table named twice: %v", err)
	}
	run, err = parseRun(t, nil, "--table", "a,b", "--source", "poll")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.config(); err == nil || !strings.Contains(err.Error(), "one polling relay per table") {
		t.Errorf("polling two tables: %v", err)
	}
	if _, err := contract.ParseTables(""); err == nil {
		t.Error("an empty table list was accepted")
	}
}

// TestBenchTables: `bench --only tables` runs the several-tables
// comparison alone (one relay reading two tables against two relays
// reading one each, on one backlog), prints its table and ends with
// both drains checked against their tables.
func TestBenchTables(t *testing.T) {
	t.Parallel()
	out, err := runCLIEnv(t, nil, "bench", "--only", "tables", "--tables", "300")
	if err != nil {
		t.Fatalf("bench --only tables: %v\n%s", err, out)
	}
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"T1 one relay, two tables (one slot) 1 1 600", "T1 two relays, one table each (two slots) 2 2 600",
		"Each T1 drain ended with the table-vs-stream check"} {
		if !strings.Contains(flat, want) {
			t.Errorf("bench output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Throughput") || strings.Contains(out, "L1 ") {
		t.Errorf("bench --only tables ran other measurements:\n%s", out)
	}
}
