// Package deps lists the Go modules the auditlens binaries are built from (their module graph,
// as the go command resolves it for each binary and platform shipped) with the licences found
// in each module, for the NOTICE file and the SBOM.
package deps

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/google/licensecheck"

	"github.com/auditlens/auditlens/deploy/release/gobuild"
)

// Module is one Go module linked into a binary.
type Module struct {
	Path, Version string
	// Own is true for the repository's own modules (replaced by a local directory).
	Own bool
	// Sum is the go.sum hash of the module's content (h1:...); empty for Own.
	Sum string
	// Licenses are the SPDX identifiers found in the module's licence files, sorted.
	Licenses []string
	// LicenseText is the content of its licence file(s); NoticeText that of its NOTICE file(s).
	LicenseText, NoticeText string
	// Binaries lists which of the binaries link it.
	Binaries []string
}

// Override gives the licence of a module whose files do not say it (a nested module whose
// licence file is at its repository's root, outside the module's zip).
type Override struct {
	License string // SPDX identifier
	Text    string // licence text, as its repository has it
	// ModuleFile, if set, is a file of the module holding the text (added to Text).
	ModuleFile string
}

// List returns every module the binaries link on the platforms, sorted by path, own modules
// included. A third-party module whose licence cannot be told (no licence file, no licence
// recognised) is an error naming it, unless overrides gives it.
func List(repo string, binaries []string, platforms []gobuild.Platform, overrides map[string]Override) ([]Module, error) {
	type key struct{ path, version string }
	mods := map[key]*Module{}
	for _, bin := range binaries {
		for _, p := range platforms {
			cmd := exec.Command("go", "list", "-deps", "-f",
				`{{with .Module}}{{.Path}} {{.Version}} {{with .Replace}}{{.Path}}{{end}}{{end}}`, "./cmd/"+bin)
			cmd.Dir = filepath.Join(repo, "services", bin)
			cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch, "GOFLAGS=-mod=readonly")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				return nil, fmt.Errorf("go list %s for %s: %w\n%s", bin, p, err, stderr.Bytes())
			}
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) == 0 {
					continue
				}
				m := Module{Path: f[0]}
				if len(f) > 1 {
					m.Version = f[1]
				}
				if len(f) > 2 && (strings.HasPrefix(f[2], "./") || strings.HasPrefix(f[2], "../")) {
					m.Own, m.Version = true, ""
				} else if m.Version == "" {
					m.Own = true // the main module
				}
				k := key{m.Path, m.Version}
				if mods[k] == nil {
					mods[k] = &m
				}
				if !slices.Contains(mods[k].Binaries, bin) {
					mods[k].Binaries = append(mods[k].Binaries, bin)
				}
			}
		}
	}
	var third []string
	for k, m := range mods {
		if !m.Own {
			third = append(third, k.path+"@"+k.version)
		}
	}
	sort.Strings(third)
	dirs, err := download(repo, third)
	if err != nil {
		return nil, err
	}
	var list []Module
	var missing []string
	for _, m := range mods {
		sort.Strings(m.Binaries)
		if !m.Own {
			d := dirs[m.Path+"@"+m.Version]
			m.Sum = d.Sum
			if err := ReadLicenses(m, d.Dir); err != nil {
				return nil, err
			}
			if o, ok := overrides[m.Path]; ok {
				if len(m.Licenses) > 0 {
					return nil, fmt.Errorf("module %s: its licence (%s) is found in its files now: remove its override", m.Path, strings.Join(m.Licenses, ", "))
				}
				text := strings.TrimSpace(m.LicenseText + "\n\n" + o.Text)
				if o.ModuleFile != "" {
					b, err := os.ReadFile(filepath.Join(d.Dir, filepath.FromSlash(o.ModuleFile)))
					if err != nil {
						return nil, fmt.Errorf("module %s: licence override: %w", m.Path, err)
					}
					text = strings.TrimSpace(text + "\n\n" + strings.TrimSpace(string(b)))
				}
				m.Licenses, m.LicenseText = []string{o.License}, text
			}
			if len(m.Licenses) == 0 {
				missing = append(missing, m.Path+"@"+m.Version)
			}
		}
		list = append(list, *m)
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("%w: %s", ErrNoLicense, strings.Join(missing, ", "))
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].Path != list[j].Path {
			return list[i].Path < list[j].Path
		}
		return list[i].Version < list[j].Version
	})
	return list, nil
}

// ErrNoLicense is returned for modules whose licence could not be told.
var ErrNoLicense = errors.New("no licence found (add the module to deploy/release/licenses/overrides.txt with its licence's SPDX id and text)")

type downloaded struct{ Dir, Sum string }

// download fetches the modules into the module cache (they are there already after a build)
// and returns where each is.
func download(repo string, mods []string) (map[string]downloaded, error) {
	out := map[string]downloaded{}
	if len(mods) == 0 {
		return out, nil
	}
	cmd := exec.Command("go", append([]string{"mod", "download", "-json"}, mods...)...)
	cmd.Dir = filepath.Join(repo, "services", "auditlens")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go mod download: %w\n%s%s", err, stderr.Bytes(), b)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var m struct{ Path, Version, Dir, Sum, Error string }
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go mod download: %w", err)
		}
		if m.Error != "" {
			return nil, fmt.Errorf("go mod download %s@%s: %s", m.Path, m.Version, m.Error)
		}
		out[m.Path+"@"+m.Version] = downloaded{m.Dir, m.Sum}
	}
	return out, nil
}

var (
	licenseFile = regexp.MustCompile(`(?i)^(licen[cs]e|copying|unlicense)([-._].*)?$`)
	noticeFile  = regexp.MustCompile(`(?i)^notice([-._].*)?$`)
)

// ReadLicenses fills m's licences from the licence and notice files at the root of dir, the
// module's directory.
func ReadLicenses(m *Module, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("module %s@%s: %w", m.Path, m.Version, err)
	}
	ids := map[string]bool{}
	var lic, notice []string
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		isLicense, isNotice := licenseFile.MatchString(e.Name()), noticeFile.MatchString(e.Name())
		if !isLicense && !isNotice {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return fmt.Errorf("module %s@%s: %w", m.Path, m.Version, err)
		}
		text := strings.TrimSpace(strings.ReplaceAll(string(b), "\r\n", "\n"))
		if isNotice {
			notice = append(notice, text)
			continue
		}
		cov := licensecheck.Scan(b)
		for _, match := range cov.Match {
			if !match.IsURL {
				ids[match.ID] = true
			}
		}
		lic = append(lic, text)
	}
	for id := range ids {
		m.Licenses = append(m.Licenses, id)
	}
	sort.Strings(m.Licenses)
	m.LicenseText = strings.Join(lic, "\n\n")
	m.NoticeText = strings.Join(notice, "\n\n")
	return nil
}
