package main

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/auditlens/auditlens/lib/kubeapi"
	"github.com/auditlens/auditlens/lib/kubeversion"
)

// moduleSpec is one line of modules.txt.
type moduleSpec struct {
	Path, Dir string
	Versions  []string
}

func readModules(path string) ([]moduleSpec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read module list: %w", err)
	}
	var out []moduleSpec
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			return nil, fmt.Errorf("%s:%d: want MODULE DIR VERSION [VERSION ...]", path, n+1)
		}
		for _, v := range f[2:] {
			if _, ok := moduleRelease(v); !ok {
				return nil, fmt.Errorf("%s:%d: version %q: want v0.MINOR.PATCH[-pre]", path, n+1, v)
			}
		}
		out = append(out, moduleSpec{Path: f[0], Dir: f[1], Versions: f[2:]})
	}
	return out, nil
}

var modVersionRE = regexp.MustCompile(`^v0\.([0-9]+)\.[0-9]+(-[0-9A-Za-z.]+)?$`)

// moduleRelease is the Kubernetes release of a staging module version (v0.25.9 is 1.25).
func moduleRelease(v string) (kubeversion.Version, bool) {
	m := modVersionRE.FindStringSubmatch(v)
	if m == nil {
		return kubeversion.Version{}, false
	}
	r, err := kubeversion.Parse("1." + m[1])
	return r, err == nil
}

func isPrerelease(v string) bool { return strings.Contains(v, "-") }

// download fetches every module version's zip into the module cache with
// `go mod download -json` (through GOPROXY, checked against go.sum's checksum database) and
// returns the zip of each, keyed "module@version". The zips are read as they are, so a module
// that asks for a newer Go than this one (a pre-release) is read all the same.
func download(mods []moduleSpec) (map[string]string, error) {
	args := []string{"mod", "download", "-json"}
	for _, m := range mods {
		for _, v := range m.Versions {
			args = append(args, m.Path+"@"+v)
		}
	}
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	cmd.Dir = os.TempDir() // outside any module: nothing is added to a go.mod
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	dirs := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	var failed []string
	for {
		var r struct{ Path, Version, Zip, Sum, Error string }
		if err := dec.Decode(&r); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("read go mod download output: %w", err)
		}
		if r.Zip == "" || r.Sum == "" || (r.Error != "" && !strings.Contains(r.Error, "requires go >=")) {
			failed = append(failed, r.Path+"@"+r.Version+": "+r.Error)
			continue
		}
		dirs[r.Path+"@"+r.Version] = r.Zip
	}
	if len(failed) > 0 || (runErr != nil && len(dirs) == 0) {
		return nil, fmt.Errorf("go mod download: %w %s%s", runErr, strings.Join(failed, "; "), stderr.String())
	}
	return dirs, nil
}

// seen is one kind across the versions of its module.
type seen struct {
	info kindInfo
	// from is the module version the values come from (the newest that has the kind).
	from   string
	module string
	// last is the release of the newest version with the kind; next that of the version
	// after it in the list (unset: the kind is in the newest version).
	last, next kubeversion.Version
	inNewest   bool
	// first is the release of the oldest version with the kind; unset when that is the
	// oldest version read (the kind may be older).
	first kubeversion.Version
}

// union reads every module version, oldest first: the newest version that has a kind gives
// its values.
func union(mods []moduleSpec, dirs map[string]string) (map[gvk]*seen, error) {
	all := map[gvk]*seen{}
	for _, m := range mods {
		for i, v := range m.Versions {
			zr, err := zip.OpenReader(dirs[m.Path+"@"+v])
			if err != nil {
				return nil, fmt.Errorf("%s@%s: %w", m.Path, v, err)
			}
			kinds, err := readModule(zr, path.Join(m.Path+"@"+v, m.Dir))
			zr.Close()
			if err != nil {
				return nil, fmt.Errorf("%s@%s: %w", m.Path, v, err)
			}
			last, _ := moduleRelease(v)
			var next kubeversion.Version
			if i+1 < len(m.Versions) {
				next, _ = moduleRelease(m.Versions[i+1])
			}
			for _, k := range kinds {
				key := gvk{k.Group, k.Version, k.Kind}
				s := all[key]
				if s == nil {
					s = &seen{}
					if i > 0 {
						s.first = last
					}
					all[key] = s
				}
				s.info, s.from, s.module = k, m.Path+"@"+v, m.Path
				s.last, s.next, s.inNewest = last, next, i == len(m.Versions)-1
			}
		}
	}
	return all, nil
}

// newestRelease is the release of the newest released (not pre-release) version read.
func newestRelease(mods []moduleSpec) kubeversion.Version {
	var n kubeversion.Version
	for _, m := range mods {
		for _, v := range m.Versions {
			if r, _ := moduleRelease(v); !isPrerelease(v) && n.Less(r) {
				n = r
			}
		}
	}
	return n
}

// notServed are API groups whose types are in k8s.io/api but that kube-apiserver does not
// serve as REST resources: webhook payloads and discovery documents.
var notServed = map[string]string{
	"admission.k8s.io":    "AdmissionReview is the body of an admission webhook call",
	"imagepolicy.k8s.io":  "ImageReview is the body of an ImagePolicyWebhook call",
	"apidiscovery.k8s.io": "aggregated discovery documents, not resources",
}

// subresourceKinds are the kinds that are only ever the body of a subresource request.
var subresourceKinds = map[string]string{
	"Eviction":           "pods/eviction",
	"Scale":              "scale",
	"DeploymentRollback": "deployments/rollback",
}

// Row is one line of the generated catalogue.
type Row struct {
	Group, Version, Resource, Kind string
	DeprecatedIn, RemovedIn        kubeversion.Version
	// IntroducedIn (served rows only) is the first release that has the kind (introduced).
	IntroducedIn                       kubeversion.Version
	Replacement, Subresource, Note     string
	Source                             string
	fromOverlay, tagged, removedByGone bool
	// replacementKnown: Replacement is the answer, even when empty (the data or the overlay
	// says there is none).
	replacementKnown bool
}

type catalogueData struct {
	APIs, BodyKinds, Served []Row
	Newest                  kubeversion.Version
	Unresolved              []string
}

// build turns the union into catalogue rows.
func build(all map[gvk]*seen, newest kubeversion.Version, ov *overlay) (*catalogueData, error) {
	out := &catalogueData{Newest: newest}
	removed := map[gvk]kubeversion.Version{}
	served := map[gvk]bool{}
	for key, s := range all {
		k := s.info
		if _, ok := notServed[k.Group]; ok || (k.Resource == "" && subresourceKinds[k.Kind] == "") {
			continue
		}
		r := effectiveRemoved(s)
		if !r.IsZero() {
			removed[key] = r
		}
		// Served: in the newest version read (a pre-release included, so a successor that
		// ships in it counts) and not removed by the newest release.
		if s.inNewest && (r.IsZero() || newest.Less(r)) {
			served[key] = true
		}
	}
	// bestServed is the most stable served version of group and kind that is at least as
	// stable as not's own and has no removal scheduled.
	bestServed := func(group, kind string, not gvk) (gvk, bool) {
		var best gvk
		found := false
		for key := range served {
			if key.Group == group && key.Kind == kind && key != not && removed[key].IsZero() &&
				kubeapi.Stability(key.Version) >= kubeapi.Stability(not.Version) {
				if !found || kubeapi.MoreStable(key.Version, best.Version) {
					best, found = key, true
				}
			}
		}
		return best, found
	}
	// resolve follows replacements to one that is served and never removed (or to the
	// overlay's word for it), and says how.
	var resolve func(from gvk, depth int) (string, []string, bool)
	resolve = func(from gvk, depth int) (string, []string, bool) {
		if o := ov.replacementOf(from); o != nil {
			return o.Replacement, []string{"overlay " + from.String() + ": " + orNone(o.Replacement)}, true
		}
		if depth > 8 {
			return "", nil, false
		}
		s := all[from]
		var next gvk
		var how string
		if s != nil && s.info.Replacement != (gvk{}) {
			next, how = s.info.Replacement, "tagged "+s.info.Replacement.String()
			if next.Kind == from.Kind+"List" {
				// networking.k8s.io/v1beta1 IngressClass names IngressClassList (an upstream slip).
				next.Kind = from.Kind
				how += " (read as " + from.Kind + ")"
			}
		} else if b, ok := bestServed(from.Group, from.Kind, from); ok {
			next, how = b, "served "+b.String()
		} else {
			return "", nil, false
		}
		if served[next] && removed[next].IsZero() {
			r := gv(next.Group, next.Version)
			if next.Kind != from.Kind || (depth > 0 && next.Kind != s.info.Kind) {
				r += " " + next.Kind
			}
			return r, []string{how}, true
		}
		end, chain, ok := resolve(next, depth+1)
		return end, append([]string{how}, chain...), ok
	}
	keys := make([]gvk, 0, len(all))
	for k := range all {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Version != b.Version {
			return a.Version < b.Version
		}
		return a.Kind < b.Kind
	})
	for _, key := range keys {
		s := all[key]
		k := s.info
		if _, ok := notServed[k.Group]; ok {
			continue
		}
		sub := subresourceKinds[k.Kind]
		if k.Resource == "" && sub == "" {
			continue
		}
		if served[key] && k.Resource != "" {
			out.Served = append(out.Served, Row{Group: k.Group, Version: k.Version, Resource: k.Resource, Kind: k.Kind, IntroducedIn: introduced(s)})
		}
		rem := removed[key]
		dep := k.Deprecated
		if rem.IsZero() && (dep.IsZero() || newest.Less(dep)) {
			continue
		}
		depNote := ""
		if !rem.IsZero() && !dep.IsZero() && rem.Less(dep) {
			depNote, dep = "tagged deprecated "+dep.String()+" (after it stopped being served)", kubeversion.Version{}
		}
		row := Row{Group: k.Group, Version: k.Version, Resource: k.Resource, Kind: k.Kind, DeprecatedIn: dep, RemovedIn: rem,
			Subresource: sub, tagged: k.Tagged}
		src := []string{s.from}
		switch {
		case !k.Tagged:
			src = append(src, "no lifecycle tags")
		case rem != k.Removed:
			src = append(src, "tagged removed "+orNone(k.Removed.String()))
		}
		if !rem.IsZero() && rem != k.Removed {
			row.removedByGone = true
			src = append(src, fmt.Sprintf("removed_in: types left %s in v0.%d", s.module, s.next.Minor))
		}
		if depNote != "" {
			src = append(src, depNote)
		}
		if repl, chain, ok := resolve(key, 0); ok {
			row.Replacement, row.replacementKnown = repl, true
			src = append(src, "replacement: "+strings.Join(chain, " -> "))
		} else if !rem.IsZero() && newest.Less(rem) {
			// A removal still to come whose successor is not served yet.
			row.Replacement, row.replacementKnown = fmt.Sprintf("the next %s %s version (none is served yet)", k.Group, k.Kind), true
			src = append(src, "replacement: no successor served yet")
		}
		row.Source = strings.Join(src, "; ")
		if sub != "" {
			out.BodyKinds = append(out.BodyKinds, row)
		} else {
			out.APIs = append(out.APIs, row)
		}
	}
	if err := ov.apply(out); err != nil {
		return nil, err
	}
	for _, r := range append(append([]Row(nil), out.APIs...), out.BodyKinds...) {
		if !r.replacementKnown && !r.RemovedIn.IsZero() {
			out.Unresolved = append(out.Unresolved, gv(r.Group, r.Version)+" "+r.Kind)
		}
	}
	sortRows(out.APIs)
	sortRows(out.BodyKinds)
	return out, nil
}

// introduced is the first release that has a kind: its prerelease-lifecycle introduced tag
// (alpha and beta versions), else the release of the first module version read that has it;
// unset when neither says (a GA kind already in the oldest version read).
func introduced(s *seen) kubeversion.Version {
	if s.info.Tagged && !s.info.Introduced.IsZero() {
		return s.info.Introduced
	}
	return s.first
}

// effectiveRemoved is the release from which a kind is not served: its tag, or, for an alpha,
// the release after its types left the module when that comes first (an alpha whose types
// were deleted before its tagged removal was not served from then on). Only alphas: GA types
// may move to another module (the CRD types moved to k8s.io/apiextensions-api in 1.38), and
// every beta removal is tagged.
func effectiveRemoved(s *seen) kubeversion.Version {
	r := s.info.Removed
	if strings.Contains(s.info.Version, "alpha") && !s.next.IsZero() && s.next == s.last.Next() {
		if r.IsZero() || s.next.Less(r) {
			return s.next
		}
	}
	return r
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func sortRows(rows []Row) {
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		// By removal, those without one last.
		if ra, rb := a.RemovedIn, b.RemovedIn; ra != rb {
			return !ra.IsZero() && (rb.IsZero() || ra.Less(rb))
		}
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Version != b.Version {
			return a.Version < b.Version
		}
		return a.Resource+a.Kind < b.Resource+b.Kind
	})
}

// write prints the generated catalogue document.
func (c *catalogueData) write(w io.Writer, mods []moduleSpec) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# Code generated by tools/catalogue (make catalogue); DO NOT EDIT.\n")
	fmt.Fprintf(bw, "#\n# The API section of the rule catalogue, from the prerelease lifecycle data\n")
	fmt.Fprintf(bw, "# (zz_generated.prerelease-lifecycle.go) of these module versions, newest value winning:\n")
	for _, m := range mods {
		fmt.Fprintf(bw, "#   %s %s\n", m.Path, strings.Join(m.Versions, " "))
	}
	fmt.Fprintf(bw, "# plus tools/catalogue/overlay.yaml (what the data lacks, each line with its source).\n")
	fmt.Fprintf(bw, "# Newest release read: %s. `source` says where each value came from.\n", c.Newest)
	fmt.Fprintf(bw, "schema_version: 1\n\n")
	fmt.Fprintf(bw, "# The newest Kubernetes release the data was read from: the console offers upgrade\n# targets up to the release after it.\nnewest_release: %q\n\n", c.Newest.String())
	fmt.Fprintf(bw, "# Removed or deprecated API versions, keyed by group/version/resource.\napis:\n")
	for _, r := range c.APIs {
		fmt.Fprintf(bw, "  - %s\n", r.yaml(false))
	}
	fmt.Fprintf(bw, "\n# Kinds that are only the body of a subresource request (pods/eviction, */scale), by\n# the apiVersion of that body.\nbody_kinds:\n")
	for _, r := range c.BodyKinds {
		fmt.Fprintf(bw, "  - %s\n", r.yaml(true))
	}
	fmt.Fprintf(bw, "\n# Every resource served by the newest release, to look a replacement up by group and kind.\n"+
		"# introduced_in: the first release that has it (its prerelease-lifecycle introduced tag, else the\n"+
		"# first module version above that has the kind; none when that is the oldest): the release\n"+
		"# below it cannot serve what is written through it (the rollback-api rule).\nserved:\n")
	for _, r := range c.Served {
		intro := ""
		if !r.IntroducedIn.IsZero() {
			intro = ", introduced_in: " + q(r.IntroducedIn.String())
		}
		fmt.Fprintf(bw, "  - {group: %s, version: %s, resource: %s, kind: %s%s}\n", q(r.Group), q(r.Version), q(r.Resource), q(r.Kind), intro)
	}
	return bw.Flush()
}

func (r Row) yaml(body bool) string {
	parts := []string{"group: " + q(r.Group), "version: " + q(r.Version)}
	if body {
		parts = append(parts, "kind: "+q(r.Kind), "subresource: "+q(r.Subresource))
	} else {
		parts = append(parts, "resource: "+q(r.Resource), "kind: "+q(r.Kind))
	}
	if !r.DeprecatedIn.IsZero() {
		parts = append(parts, "deprecated_in: "+q(r.DeprecatedIn.String()))
	}
	if !r.RemovedIn.IsZero() {
		parts = append(parts, "removed_in: "+q(r.RemovedIn.String()))
	}
	if r.Replacement != "" {
		parts = append(parts, "replacement: "+q(r.Replacement))
	}
	if r.Note != "" {
		parts = append(parts, "note: "+q(r.Note))
	}
	parts = append(parts, "source: "+q(r.Source))
	return "{" + strings.Join(parts, ", ") + "}"
}

var plainRE = regexp.MustCompile(`^[a-z][a-zA-Z0-9./-]*$`)

// q quotes a YAML scalar unless it is a plain lower-case name; versions are always quoted.
func q(s string) string {
	if plainRE.MatchString(s) && !strings.Contains(s, ": ") {
		return s
	}
	if s != "" && s[0] >= 'A' && s[0] <= 'Z' && regexp.MustCompile(`^[A-Za-z0-9]+$`).MatchString(s) {
		return s
	}
	return strconv.Quote(s)
}
