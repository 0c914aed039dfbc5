// Package checklist is `classify catalogue`: what the rule catalogue says is removed or
// deprecated between two Kubernetes releases, as a table, JSON lines or Markdown, before any
// log or manifest is read.
package checklist

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/auditlens/auditlens/lib/flagenv"
	"github.com/auditlens/auditlens/lib/kubeversion"
	"github.com/auditlens/auditlens/lib/printable"
	"github.com/auditlens/auditlens/services/classify/rules"
	"github.com/auditlens/auditlens/services/classify/scan"
)

const synopsis = `usage: classify catalogue --to X.Y [--from X.Y] [--format table|json|markdown]

Lists what the rule catalogue (embedded, plus --rules-file) says stops being served or is
deprecated in the releases after --from up to and including --to: every API version (with its
replacement) and every feature rule with a release (PodSecurityPolicy, alpha seccomp, ...).
The upgrade checklist before any log is read. Exit status 0, or 1 on an error.`

// Config holds the flags of classify catalogue.
type Config struct {
	From, To   string
	Format     string
	RulesFiles flagenv.StringList
}

// RegisterFlags adds the flags to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.From, "from", "", "Kubernetes `X.Y` the cluster runs now: changes in releases after it (empty: every earlier release)")
	fs.StringVar(&c.To, "to", "", "Kubernetes `X.Y` to upgrade to: changes up to and including it (required)")
	fs.StringVar(&c.Format, "format", "table", "output format: table, json (one entry per line) or markdown")
	fs.Var(&c.RulesFiles, "rules-file", "extra catalogue `files`, comma-separated or repeated, that add or override entries")
}

// Validate checks the flag values.
func (c *Config) Validate() error {
	if c.To == "" {
		return errors.New("--to is required: the Kubernetes X.Y to upgrade to, e.g. --to 1.37")
	}
	var parsed [2]kubeversion.Version
	for i, v := range [][2]string{{"--from", c.From}, {"--to", c.To}} {
		var err error
		if parsed[i], err = kubeversion.Parse(v[1]); err != nil && v[1] != "" {
			return fmt.Errorf("%s %q: want MAJOR.MINOR, e.g. 1.32", v[0], v[1])
		}
	}
	if from, to := parsed[0], parsed[1]; !from.IsZero() && !from.Less(to) {
		return fmt.Errorf("--from %s is not before --to %s", from, to)
	}
	switch c.Format {
	case "table", "json", "markdown":
	default:
		return fmt.Errorf("--format %q: want table, json or markdown", c.Format)
	}
	return nil
}

// Entry is one line of the checklist.
type Entry struct {
	// Change is "removed" (stops being served, or stops working, in Release), "deprecated",
	// "introduced" (an API version first served in Release: a rollback below it does not
	// serve it, rule rollback-api) or "checked" (tied to no release: drains, webhooks, a
	// client's skew; Release "-").
	Change       string `json:"change"`
	Release      string `json:"release"`
	What         string `json:"what"` // "api", "subresource body", "feature" or "version skew"
	Group        string `json:"group,omitempty"`
	Version      string `json:"version,omitempty"`
	Resource     string `json:"resource,omitempty"`
	Kind         string `json:"kind,omitempty"`
	Rule         string `json:"rule,omitempty"`
	DeprecatedIn string `json:"deprecated_in"`
	RemovedIn    string `json:"removed_in"`
	Replacement  string `json:"replacement"`
	Note         string `json:"note,omitempty"`
	Source       string `json:"source,omitempty"`
}

// API is the entry's API ("group/version resource"), or its rule for a feature.
func (e Entry) API() string {
	if e.What == "feature" || e.What == "version skew" {
		return e.Rule
	}
	gv := e.Version
	if e.Group != "" {
		gv = e.Group + "/" + e.Version
	}
	if e.Resource != "" {
		return gv + " " + e.Resource
	}
	return gv + " " + e.Kind
}

// Build lists the catalogue's changes in (from, to], removals first, by release (a zero from:
// every release up to to).
func Build(c *rules.Catalogue, from, to kubeversion.Version) []Entry {
	in := func(s string) bool {
		v := release(s)
		return !v.IsZero() && from.Less(v) && !to.Less(v)
	}
	var out []Entry
	add := func(e Entry) {
		switch {
		case in(e.RemovedIn):
			e.Change, e.Release = "removed", e.RemovedIn
		case in(e.DeprecatedIn) && (e.RemovedIn == "" || to.Less(release(e.RemovedIn))):
			e.Change, e.Release = "deprecated", e.DeprecatedIn
		default:
			return
		}
		out = append(out, e)
	}
	for _, a := range c.APIs {
		if a.Component != "" {
			continue // released with a component (cert-manager, istio, ...), not with Kubernetes
		}
		add(Entry{What: "api", Group: a.Group, Version: a.Version, Resource: a.Resource, Kind: a.Kind,
			DeprecatedIn: a.DeprecatedIn, RemovedIn: a.RemovedIn, Replacement: a.Replacement, Note: a.Note, Source: a.Source})
	}
	for _, b := range c.BodyKinds {
		add(Entry{What: "subresource body", Group: b.Group, Version: b.Version, Kind: b.Kind, Note: b.Subresource,
			DeprecatedIn: b.DeprecatedIn, RemovedIn: b.RemovedIn, Replacement: b.Replacement, Source: b.Source})
	}
	for _, r := range c.Rules {
		if r.Disabled || r.ID == rules.RemovedAPI || r.ID == rules.DeprecatedAPI {
			continue
		}
		if r.DeprecatedIn == "" && r.RemovedIn == "" && !hasReleasedEntries(c, r.ID) {
			// Tied to no release (drains, webhooks, a retired controller): checked on every log.
			out = append(out, Entry{Change: "checked", Release: "-", What: "feature", Rule: r.ID, Replacement: r.Replacement, Source: r.Source})
			continue
		}
		add(Entry{What: "feature", Rule: r.ID, DeprecatedIn: r.DeprecatedIn, RemovedIn: r.RemovedIn, Replacement: r.Replacement, Source: r.Source})
	}
	for _, rt := range c.Runtimes {
		add(Entry{What: "feature", Rule: rt.Rule, Kind: "container runtime " + rt.Prefix + "*", RemovedIn: rt.RemovedIn, Replacement: rt.Replacement, Source: rt.Source})
	}
	for _, sk := range c.VersionSkew {
		out = append(out, skewEntry(sk, to))
	}
	if r := c.Rule(rules.RollbackAPI); r != nil && !r.Disabled {
		floor, _ := rules.RollbackFloor(c) // the releases the rule follows
		for _, sv := range c.Served {
			if in(sv.IntroducedIn) && !release(sv.IntroducedIn).Less(floor) {
				out = append(out, Entry{Change: "introduced", Release: sv.IntroducedIn, What: "api", Rule: rules.RollbackAPI,
					Group: sv.Group, Version: sv.Version, Resource: sv.Resource, Kind: sv.Kind,
					Note:   "a rollback below " + sv.IntroducedIn + " does not serve it",
					Source: "served by the catalogue's newest release (tools/catalogue): introduced_in " + sv.IntroducedIn})
			}
		}
	}
	for _, group := range []struct {
		rule string
		list []rules.AnnotationSpec
	}{{"object_annotations", c.ObjectAnnotations}} {
		for _, a := range group.list {
			if a.DeprecatedIn == "" && a.RemovedIn == "" {
				continue
			}
			add(Entry{What: "feature", Rule: a.Rule, Kind: a.Key + a.Prefix, DeprecatedIn: a.DeprecatedIn, RemovedIn: a.RemovedIn, Replacement: a.Replacement})
		}
	}
	for _, l := range c.Labels {
		add(Entry{What: "feature", Rule: l.Rule, Kind: "label " + l.Key, DeprecatedIn: l.DeprecatedIn, RemovedIn: l.RemovedIn, Replacement: l.Replacement})
	}
	order := map[string]int{"removed": 0, "deprecated": 1, "introduced": 2, "checked": 3}
	slices.SortStableFunc(out, func(a, b Entry) int {
		if a.Change != b.Change {
			return order[a.Change] - order[b.Change]
		}
		if d := kubeversion.Compare(release(a.Release), release(b.Release)); d != 0 {
			return d
		}
		return strings.Compare(a.API(), b.API())
	})
	return out
}

// skewEntry is what the version-skew policy of one component requires at to: the node
// components' releases that to no longer supports (a removal at to), or the range a client
// must be in (checked, blocking nothing).
func skewEntry(sk rules.SkewSpec, to kubeversion.Version) Entry {
	e := Entry{What: "version skew", Rule: sk.Rule, Resource: sk.Component, Source: sk.Source}
	if sk.Newer > 0 {
		lo := kubeversion.Version{Major: to.Major, Minor: max(to.Minor-sk.Older, 0)}
		hi := kubeversion.Version{Major: to.Major, Minor: to.Minor + sk.Newer}
		e.Change, e.Release = "checked", "-"
		e.Kind = fmt.Sprintf("%s outside %s to %s", sk.Component, lo, hi)
		e.Replacement = fmt.Sprintf("%s %s to %s", sk.Component, lo, hi)
		return e
	}
	// The oldest release of the component that to still supports.
	oldest := to
	for oldest.Minor > 0 {
		prev := kubeversion.Version{Major: oldest.Major, Minor: oldest.Minor - 1}
		if sk.Supports(prev).Less(to) {
			break
		}
		oldest = prev
	}
	e.Change, e.Release, e.RemovedIn = "removed", to.String(), to.String()
	e.Kind = fmt.Sprintf("%s before %s", sk.Component, oldest)
	e.Replacement = fmt.Sprintf("%s %s or later on every node before the control plane goes to %s", sk.Component, oldest, to)
	return e
}

// hasReleasedEntries reports whether rule id has entries listed with their own releases
// (version-skew rows, runtimes, labels, object annotations).
func hasReleasedEntries(c *rules.Catalogue, id string) bool {
	if id == rules.RollbackAPI {
		return true // the served API versions, each with the release that introduced it
	}
	return slices.ContainsFunc(c.VersionSkew, func(s rules.SkewSpec) bool { return s.Rule == id }) ||
		slices.ContainsFunc(c.Runtimes, func(r rules.RuntimeSpec) bool { return r.Rule == id }) ||
		slices.ContainsFunc(c.Labels, func(l rules.LabelSpec) bool { return l.Rule == id }) ||
		slices.ContainsFunc(c.ObjectAnnotations, func(a rules.AnnotationSpec) bool { return a.Rule == id })
}

// Main runs `classify catalogue` with args (after "catalogue") and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("classify catalogue", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	cfg.RegisterFlags(fs)
	flagenv.Usage(fs, synopsis)
	if err := flagenv.Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "classify catalogue: %v\n", err)
		return 1
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "classify catalogue: %v\n", err)
		return 1
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "classify catalogue: unexpected argument %q: give --from and --to\n", fs.Arg(0))
		return 1
	}
	cat, err := rules.Load(cfg.RulesFiles...)
	if err != nil {
		fmt.Fprintf(stderr, "classify catalogue: %v\n", err)
		return 1
	}
	// Checked by Validate; from is unset when empty.
	from, _ := kubeversion.Parse(cfg.From)
	to, _ := kubeversion.Parse(cfg.To)
	entries := Build(cat, from, to)
	switch cfg.Format {
	case "json":
		err = writeJSON(stdout, entries)
	case "markdown":
		err = writeMarkdown(stdout, entries, from, to)
	default:
		err = writeTable(stdout, scan.OutputWidth(stdout), entries, from, to)
	}
	if err != nil {
		fmt.Fprintf(stderr, "classify catalogue: write output: %v\n", err)
		return 1
	}
	return 0
}

func writeJSON(w io.Writer, entries []Entry) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, e := range entries {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return nil
}

func span(from, to kubeversion.Version) string {
	if from.IsZero() {
		return "up to " + to.String()
	}
	return "after " + from.String() + " up to " + to.String()
}

// writeTable prints the entries as a table fitted to width: long values wrap, none is cut.
func writeTable(w io.Writer, width int, entries []Entry, from, to kubeversion.Version) error {
	g := scan.Grid{Columns: []scan.Column{{Name: "RELEASE", Min: 7}, {Name: "CHANGE", Min: 10}, {Name: "API OR FEATURE", Min: 16},
		{Name: "REPLACEMENT", Min: 16}}}
	for _, e := range entries {
		change := e.Change
		switch e.Change {
		case "deprecated":
			change += ", removal " + removal(e)
		case "introduced":
			change += " (rollback)"
		}
		what := e.API()
		if e.What != "api" && e.Kind != "" {
			what += " (" + e.Kind + ")"
		}
		g.Add(e.Release, change, printable.String(what), printable.String(dash(e.Replacement)))
	}
	if err := g.Write(w, width); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d removed and %d deprecated %s;\n%d introduced (a rollback below its release does not serve it);\n"+
		"%d more checked in every log whatever the release (drains, webhooks, clients).\nEach entry's source: --format json or markdown.\n",
		count(entries, "removed"), count(entries, "deprecated"), span(from, to), count(entries, "introduced"), count(entries, "checked"))
	return err
}

func writeMarkdown(w io.Writer, entries []Entry, from, to kubeversion.Version) error {
	title := "Kubernetes " + to.String()
	if !from.IsZero() {
		title = "Kubernetes " + from.String() + " to " + to.String()
	}
	fmt.Fprintf(w, "# Upgrade checklist: %s\n\n", title)
	for _, change := range []string{"removed", "deprecated", "introduced", "checked"} {
		heading := map[string]string{"removed": "Removed (no longer served or no longer working)", "deprecated": "Deprecated (still served)",
			"introduced": "Introduced (a rollback below the release does not serve it)",
			"checked":    "Checked in every log, whatever the release"}[change]
		fmt.Fprintf(w, "## %s\n\n", heading)
		n := 0
		for _, e := range entries {
			if e.Change != change {
				continue
			}
			if n == 0 {
				fmt.Fprintf(w, "| release | API or feature | kind | removal | replacement | source |\n|---|---|---|---|---|---|\n")
			}
			n++
			fmt.Fprintf(w, "| %s | `%s` | %s | %s | %s | %s |\n", e.Release, md(e.API()), md(e.Kind), removal(e), md(e.Replacement), md(dash(e.Source)))
		}
		if n == 0 {
			fmt.Fprintf(w, "Nothing %s.\n", span(from, to))
		}
		fmt.Fprintln(w)
	}
	return nil
}

// removal says when a deprecated entry goes: its release, or "none scheduled".
func removal(e Entry) string {
	if e.Change == "introduced" {
		return "-"
	}
	if e.RemovedIn != "" {
		return e.RemovedIn
	}
	return "none scheduled"
}

func count(entries []Entry, change string) int {
	n := 0
	for _, e := range entries {
		if e.Change == change {
			n++
		}
	}
	return n
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// md escapes text for a Markdown table cell.
func md(s string) string {
	s = printable.String(s)
	r := strings.NewReplacer("|", `\|`, "`", "'", "<", "&lt;", ">", "&gt;")
	return r.Replace(s)
}

// release is a catalogue version ("1.25", checked when the catalogue loaded); "" is the zero
// Version.
func release(s string) kubeversion.Version {
	v, _ := kubeversion.Parse(s)
	return v
}
