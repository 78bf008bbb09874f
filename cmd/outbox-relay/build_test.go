package main

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestProductionBuildLinksNoLab: `go build -tags nolab` links none of the
// lab, and the default build links all of it (so that this test can fail).
func TestProductionBuildLinksNoLab(t *testing.T) {
	t.Parallel()
	// What the production build must not link: the embedded nats-server,
	// the benchmark's charts, the example service and the lab's own
	// packages. A path ending in / stands for everything under it.
	labPackages := []string{
		"github.com/nats-io/nats-server/",
		"github.com/outbox-relay/outbox-relay/examples/",
		"github.com/outbox-relay/outbox-relay/internal/lab/bench",
		"github.com/outbox-relay/outbox-relay/internal/lab/devenv",
		"github.com/outbox-relay/outbox-relay/internal/lab/natsproc",
	}
	deps := func(tags ...string) []string {
		t.Helper()
		args := append(append([]string{"list", "-deps"}, tags...), ".")
		out, err := exec.Command("go", args...).Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				err = fmt.Errorf("%w\n%s", err, ee.Stderr)
			}
			t.Fatalf("go %s: %v", strings.Join(args, " "), err)
		}
		return strings.Fields(string(out))
	}
	linked := func(pkgs []string, lab string) bool {
		return slices.ContainsFunc(pkgs, func(p string) bool {
			if strings.HasSuffix(lab, "/") {
				return strings.HasPrefix(p, lab)
			}
			return p == lab || strings.HasPrefix(p, lab+"/")
		})
	}
	production, lab := deps("-tags", "nolab"), deps()
	for _, p := range labPackages {
		if linked(production, p) {
			t.Errorf("the production build (-tags nolab) links %s", p)
		}
		if !linked(lab, p) {
			t.Errorf("the default build does not link %s: is this list still right?", p)
		}
	}
	// The tests' browser driver is linked by neither build.
	for _, p := range []string{"github.com/chromedp/", "github.com/outbox-relay/outbox-relay/internal/lab/browser"} {
		if linked(production, p) || linked(lab, p) {
			t.Errorf("a build of outbox-relay links %s, which only tests may import", p)
		}
	}
	t.Logf("go list -deps: %d packages, %d with -tags nolab", len(lab), len(production))
}

// TestProductionBuildWithoutDev: the production build does not list dev
// and bench, and asked for them, exits 2 saying how to run them.
func TestProductionBuildWithoutDev(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "outbox-relay")
	if out, err := exec.Command("go", "build", "-tags", "nolab", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags nolab: %v\n%s", err, out)
	}
	help, err := exec.Command(bin, "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(help), "  run ") || strings.Contains(string(help), "  dev ") || strings.Contains(string(help), "  bench ") {
		t.Errorf("--help (%v) lists dev or bench, or not run:\n%s", err, help)
	}
	for _, args := range [][]string{{"dev"}, {"dev", "--count", "3"}, {"bench", "--events", "10"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		var ee *exec.ExitError
		want := "production build of outbox-relay (built with -tags nolab"
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), want) || !strings.Contains(string(out), "go run ./cmd/outbox-relay "+args[0]) {
			t.Errorf("%s: %v, want exit 2 and how to run it:\n%s", strings.Join(args, " "), err, out)
		}
	}
}
