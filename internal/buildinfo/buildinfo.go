// Package buildinfo says which build of outbox-relay runs: its module
// version, commit and Go version, as --version prints them and as the
// outbox_relay_build_info metric serves them.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Info is what the binary knows of its own build, from the Go
// toolchain's stamp (runtime/debug.ReadBuildInfo): nothing to set by hand
// at release time.
type Info struct {
	Version   string // module version: a tag, a pseudo-version, or (devel)
	GoVersion string
	Revision  string // VCS commit, "-dirty" appended for a modified tree; "unknown" when not stamped
}

// Read reads the binary's build stamp. `go build` in a git
// checkout stamps the commit (and, since Go 1.24, a version derived from
// it); -buildvcs=false or a build outside a checkout leaves them unknown.
func Read() Info {
	bi, _ := debug.ReadBuildInfo()
	return From(bi, runtime.Version())
}

// From reads a build stamp (nil: none) of a binary built by Go
// goVersion.
func From(bi *debug.BuildInfo, goVersion string) Info {
	b := Info{Version: "(devel)", GoVersion: goVersion, Revision: "unknown"}
	if bi == nil {
		return b
	}
	if v := bi.Main.Version; v != "" {
		b.Version = v
	}
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && b.Revision != "unknown" {
		b.Revision += "-dirty"
	}
	return b
}

// String is the build as --version prints it.
func (b Info) String() string {
	return fmt.Sprintf("outbox-relay %s (revision %s, %s)", b.Version, b.Revision, b.GoVersion)
}

// Collector returns outbox_relay_build_info, always 1, with the build in
// its labels: join it to other series to see which build produced them.
func (b Info) Collector() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "outbox_relay_build_info",
		Help: "Always 1; the labels say which build of outbox-relay runs.",
	}, []string{"version", "go_version", "revision"})
	g.WithLabelValues(b.Version, b.GoVersion, b.Revision).Set(1)
	return g
}
