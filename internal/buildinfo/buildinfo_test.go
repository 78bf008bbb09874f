package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestBuildInfoFrom: how a build stamp reads, stamp by stamp.
func TestBuildInfoFrom(t *testing.T) {
	stamp := func(version string, settings ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/outbox-relay/outbox-relay", Version: version}}
		for _, s := range settings {
			k, v, _ := strings.Cut(s, "=")
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: k, Value: v})
		}
		return bi
	}
	const rev = "66cb13d9990bee6a4f5972a15cb0875201a9acb2"
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want Info
	}{
		{"no stamp", nil, Info{"(devel)", "go1.99.1", "unknown"}},
		{"no VCS", stamp("(devel)"), Info{"(devel)", "go1.99.1", "unknown"}},
		{"empty version", stamp(""), Info{"(devel)", "go1.99.1", "unknown"}},
		{"tag", stamp("v1.4.0", "vcs.revision="+rev, "vcs.modified=false"), Info{"v1.4.0", "go1.99.1", rev}},
		{"modified", stamp("v0.0.0-20261206014408-66cb13d9990b+dirty", "vcs.revision="+rev, "vcs.modified=true"),
			Info{"v0.0.0-20261206014408-66cb13d9990b+dirty", "go1.99.1", rev + "-dirty"}},
		{"modified without revision", stamp("(devel)", "vcs.modified=true"), Info{"(devel)", "go1.99.1", "unknown"}},
	} {
		if got := From(tc.bi, "go1.99.1"); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if got, want := (Info{"v1.4.0", "go1.99.1", rev}).String(), "outbox-relay v1.4.0 (revision "+rev+", go1.99.1)"; got != want {
		t.Errorf("String: %q, want %q", got, want)
	}
}
