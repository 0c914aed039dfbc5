// Package gobuild compiles the auditlens binaries the way every shipped artefact needs them:
// no cgo, no paths of the build machine, time zone data embedded, no symbol tables, stamped
// with the version, commit and date (lib/buildinfo), so that the same commit gives the same
// bytes on any machine.
package gobuild

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Binaries are the four commands: services/<name>/cmd/<name>.
var Binaries = []string{"ingest", "classify", "report", "auditlens"}

// Platform is a GOOS/GOARCH pair.
type Platform struct{ OS, Arch string }

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// ParsePlatform reads "linux/amd64".
func ParsePlatform(s string) (Platform, error) {
	os, arch, ok := strings.Cut(s, "/")
	if !ok || os == "" || arch == "" {
		return Platform{}, fmt.Errorf("platform %q: want GOOS/GOARCH", s)
	}
	return Platform{os, arch}, nil
}

// Stamp is what lib/buildinfo reports.
type Stamp struct {
	Version string    // deploy/VERSION
	Commit  string    // full commit hash
	Date    time.Time // the commit's time: a build does not depend on when it ran
}

// buildinfo is the package whose variables the stamp sets.
const buildinfo = "github.com/auditlens/auditlens/lib/buildinfo"

// LDFlags is the -ldflags value of a shipped build.
func (s Stamp) LDFlags() string {
	return fmt.Sprintf("-s -w -buildid= -X %s.version=%s -X %s.commit=%s -X %s.date=%s",
		buildinfo, s.Version, buildinfo, s.Commit, buildinfo, s.Date.UTC().Format(time.RFC3339))
}

// StampOf reads the version from repo/deploy/VERSION and the commit and its time from git.
func StampOf(repo string) (Stamp, error) {
	b, err := os.ReadFile(filepath.Join(repo, "deploy", "VERSION"))
	if err != nil {
		return Stamp{}, fmt.Errorf("read the version: %w", err)
	}
	s := Stamp{Version: strings.TrimSpace(string(b))}
	if s.Version == "" || strings.ContainsAny(s.Version, " \t\n/") {
		return Stamp{}, fmt.Errorf("deploy/VERSION %q is not a version", s.Version)
	}
	if s.Commit, err = git(repo, "rev-parse", "HEAD"); err != nil {
		return Stamp{}, err
	}
	secs, err := git(repo, "log", "-1", "--format=%ct")
	if err != nil {
		return Stamp{}, err
	}
	var n int64
	if _, err := fmt.Sscan(secs, &n); err != nil {
		return Stamp{}, fmt.Errorf("commit time %q: %w", secs, err)
	}
	s.Date = time.Unix(n, 0).UTC()
	return s, nil
}

func git(repo string, args ...string) (string, error) {
	out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Flags are the compiler's flags of every release build (with CGO_ENABLED=0): paths trimmed
// for reproducibility, the time zone database inside (a scratch image has none). make test
// builds the tests with the same flags (the Makefile's TEST_GOFLAGS), so the release and the
// images reuse the tests' compiled packages from Go's build cache.
var Flags = []string{"-trimpath", "-tags=timetzdata"}

// Build compiles binary name for p into out (a file path), from the repository at repo.
func Build(repo, name string, p Platform, s Stamp, out string) error {
	module := filepath.Join(repo, "services", name)
	if _, err := os.Stat(filepath.Join(module, "cmd", name)); err != nil {
		return fmt.Errorf("binary %q: no services/%s/cmd/%s", name, name, name)
	}
	abs, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	args := append([]string{"build"}, Flags...)
	cmd := exec.Command("go", append(args, "-buildvcs=false", "-ldflags", s.LDFlags(), "-o", abs, "./cmd/"+name)...)
	cmd.Dir = module
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOOS="+p.OS, "GOARCH="+p.Arch, "GOFLAGS=-mod=readonly")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s for %s: %w\n%s", name, p, err, b)
	}
	return nil
}
