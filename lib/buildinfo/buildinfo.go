// Package buildinfo says which build of auditlens is running: the version of deploy/VERSION,
// the commit and the build date stamped by the release build, and the Go version.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Set by the release build (make build, make release, make images) with
// -ldflags "-X github.com/auditlens/auditlens/lib/buildinfo.version=... -X ...commit=... -X ...date=...".
var version, commit, date string

// Package is the import path the -X flags name.
const Package = "github.com/auditlens/auditlens/lib/buildinfo"

// Info describes one build.
type Info struct {
	Version   string // deploy/VERSION, or "devel" for a build without the stamps
	Commit    string // full commit hash, "+dirty" appended for a build from a modified tree
	Date      string // build date (the commit's time in a release: builds are reproducible), RFC 3339
	GoVersion string
}

// Get returns this binary's build information. Without the release stamps (a plain go build
// or go test) it falls back on what the go command records: the commit and its time when
// the binary was built inside the git work tree, else "unknown".
func Get() Info {
	i := Info{Version: version, Commit: commit, Date: date, GoVersion: runtime.Version()}
	if i.Version == "" {
		i.Version = "devel"
	}
	if i.Commit == "" || i.Date == "" {
		var rev, at string
		dirty := false
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.time":
					at = s.Value
				case "vcs.modified":
					dirty = s.Value == "true"
				}
			}
		}
		if rev != "" && dirty {
			rev += "+dirty"
		}
		if i.Commit == "" {
			i.Commit = or(rev, "unknown")
		}
		if i.Date == "" {
			i.Date = or(at, "unknown")
		}
	}
	return i
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// String is what --version prints: "<name> <version>" then the commit, date and Go version,
// one per line.
func (i Info) String(name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\ncommit: %s\nbuilt: %s\ngo: %s %s/%s\n", name, i.Version, i.Commit, i.Date, i.GoVersion, runtime.GOOS, runtime.GOARCH)
	return b.String()
}

// Collector is the gauge auditlens_build_info{version,commit,goversion}, always 1, so that a
// dashboard can tell which build each process runs.
func (i Info) Collector() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "auditlens_build_info",
		Help:        "The build of this process (always 1): its version, commit and Go version.",
		ConstLabels: prometheus.Labels{"version": i.Version, "commit": i.Commit, "goversion": i.GoVersion},
	})
	g.Set(1)
	return g
}

// IsVersionFlag reports whether args ask for the version only (--version or -version, alone).
func IsVersionFlag(args []string) bool {
	return len(args) == 1 && (args[0] == "--version" || args[0] == "-version")
}
