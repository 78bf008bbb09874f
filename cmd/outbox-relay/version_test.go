package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/buildinfo"
	"github.com/outbox-relay/outbox-relay/internal/lab/relaytest"
)

// TestBuildInfoAndVersion: a binary built with VCS stamping on prints with
// --version, and serves as outbox_relay_build_info, the build the Go
// toolchain reads from that binary (`go version -m`): the module version,
// the commit with -dirty for a modified tree ("unknown" when unstamped),
// the Go version. The stamp itself is checked against git (the checkout's
// HEAD and whether it has changes) and the Go version against
// `go env GOVERSION`, so nothing expected comes from the code under test.
func TestBuildInfoAndVersion(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "outbox-relay")
	// -buildvcs=true overrides a GOFLAGS=-buildvcs=false; it stamps what it
	// can (nothing outside a checkout Go recognises, a git worktree among
	// them) and fails only when a checkout cannot be read.
	if out, err := exec.Command("go", "build", "-buildvcs=true", "-o", exe, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -buildvcs=true: %v\n%s", err, out)
	}
	want := toolchainStamp(t, exe)
	checkStamp(t, want)

	out, err := exec.Command(exe, "--version").CombinedOutput()
	line := fmt.Sprintf("outbox-relay %s (revision %s, %s)", want.Version, want.Revision, want.GoVersion)
	if err != nil || strings.TrimSpace(string(out)) != line {
		t.Errorf("--version (%v): %q, want %q", err, out, line)
	}
	env := suite.NewEnv(t)
	relay := relaytest.StartRelay(t, relaytest.Binary{Path: exe}, append([]string{"run"}, env.RelayArgs()...)...)
	relay.WaitLog("serving /metrics", 30*time.Second)
	series := fmt.Sprintf(`outbox_relay_build_info{go_version=%q,revision=%q,version=%q}`, want.GoVersion, want.Revision, want.Version)
	if v, err := relay.Metric(series); err != nil || v != 1 {
		body, _ := relay.Scrape()
		t.Errorf("%s = %v (%v); build info served:\n%s", series, v, err, grepLines(body, "outbox_relay_build_info"))
	}
}

// toolchainStamp reads the build of exe as `go version -m` prints it:
// "<exe>: <go version>", then tab-separated "mod <path> <version>" and
// "build <key>=<value>" lines.
func toolchainStamp(t *testing.T, exe string) buildinfo.Info {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", exe).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	b := buildinfo.Info{Revision: "unknown"}
	_, b.GoVersion, _ = strings.Cut(lines[0], ": ")
	dirty := false
	for _, line := range lines[1:] {
		f := strings.Split(strings.TrimSpace(line), "\t")
		switch {
		case len(f) >= 3 && f[0] == "mod":
			b.Version = f[2]
		case len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.revision="):
			b.Revision = strings.TrimPrefix(f[1], "vcs.revision=")
		case len(f) == 2 && f[0] == "build" && f[1] == "vcs.modified=true":
			dirty = true
		}
	}
	if dirty {
		b.Revision += "-dirty"
	}
	if b.Version == "" || b.GoVersion == "" {
		t.Fatalf("go version -m %s: no module version or Go version in:\n%s", exe, out)
	}
	t.Logf("go version -m: version %s, revision %s, %s", b.Version, b.Revision, b.GoVersion)
	return b
}

// checkStamp checks the toolchain's reading of the build against the
// sources it came from: `go env GOVERSION`, and, when stamped, git.
func checkStamp(t *testing.T, b buildinfo.Info) {
	t.Helper()
	if gv := command(t, "go", "env", "GOVERSION"); b.GoVersion != gv {
		t.Errorf("built by %s, go env GOVERSION says %s", b.GoVersion, gv)
	}
	rev, dirty := strings.CutSuffix(b.Revision, "-dirty")
	if rev == "unknown" {
		t.Logf("the build is not stamped with VCS information (not a git checkout Go recognises): expecting revision unknown")
		return
	}
	if head := command(t, "git", "rev-parse", "HEAD"); rev != head {
		t.Errorf("stamped revision %s, git HEAD is %s", rev, head)
	}
	if changed := command(t, "git", "status", "--porcelain") != ""; changed != dirty {
		t.Errorf("stamped as modified: %v; git status lists changes: %v", dirty, changed)
	}
	// Go derives the version from the commit: a tag on it, or else a
	// pseudo-version naming it; +dirty for a modified tree.
	version, plusDirty := strings.CutSuffix(b.Version, "+dirty")
	tags := strings.Fields(command(t, "git", "tag", "--points-at", "HEAD"))
	if !slices.Contains(tags, version) && !strings.HasSuffix(version, "-"+rev[:12]) {
		t.Errorf("stamped version %q is neither a tag on HEAD %v nor a pseudo-version of %s", b.Version, tags, rev[:12])
	}
	if plusDirty != dirty {
		t.Errorf("stamped version %q, stamped as modified: %v", b.Version, dirty)
	}
}

// command runs name with args and returns its trimmed standard output.
func command(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}
