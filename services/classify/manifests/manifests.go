// Package manifests is `classify manifests`: the catalogue and the object rules over
// Kubernetes manifests (YAML or JSON, multi-document, directories, stdin) instead of audit
// events, so what is about to be applied is checked like what is still being called.
package manifests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/flagenv"
	"github.com/auditlens/auditlens/lib/kubeversion"
	"github.com/auditlens/auditlens/lib/printable"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/classify/rules"
	"github.com/auditlens/auditlens/services/classify/scan"
)

const synopsis = `usage: classify manifests [flags] [PATH...]

Checks Kubernetes manifests against the rule catalogue: removed or deprecated apiVersions,
PodSecurityPolicy objects, alpha seccomp and AppArmor annotations, beta and master node labels
in selectors, affinities and spread constraints, Service topologyKeys, CSR usages with their key
type. PATH is a YAML or JSON file (several documents separated by ---, or a List), a directory
(every .yaml, .yml and .json file below it), or - for stdin:

  helm template my-release ./chart | classify manifests --target-version 1.37 -

Helm 3 release storage (Secrets of type helm.sh/release.v1 and ConfigMaps labelled owner=helm,
alone or in the List of kubectl get secrets -A -l owner=helm -o yaml) is opened and the
release's manifest checked, its findings naming the release, namespace, revision and chart; in
a List, only the latest deployed revision of each release (--helm-all-revisions: every one).
--helm-live reads them from the cluster of a kubeconfig instead of files:

  classify manifests --helm-live --kubeconfig ~/.kube/config --target-version 1.37

Findings are the JSON lines of classify scan, with the audit fields empty and "source" naming
the file and document (--format table for a table, markdown for a pull request). For CI,
--format sarif writes a SARIF 2.1.0 log (one result per finding, located at the file and the
line its object's document starts on; an error when it blocks --target-version, else a
warning) and --format junit a JUnit XML report (one test case per rule, API and object: failed
when it blocks, else skipped); the summary stays on stderr, so stdout holds only the report. A template
(a file with {{ }} actions that is not YAML) is skipped with a note: render it first. Exit
status: 0 no findings, 2 only deprecations and hygiene, 3 something removed at or before
--target-version (even when some input could not be read), 1 an error (a file that cannot be
read or parsed is reported on stderr and in the summary, and the others are still checked).`

// Config holds the flags of classify manifests.
type Config struct {
	TargetVersion string
	// CurrentVersion is the release the cluster runs (what is removed at or before it cannot
	// be applied today).
	CurrentVersion string
	// TargetVersions are the releases of third-party components judged against.
	TargetVersions scan.ComponentTargets
	Format         string
	RulesFiles     flagenv.StringList
	MaxFileSize    int
	// MaxDocumentSize bounds one document once decoded (aliases expanded), and a Helm
	// release once decompressed, in bytes.
	MaxDocumentSize int
	// HelmAllRevisions checks every revision of a Helm release, not only the latest deployed.
	HelmAllRevisions bool
	// HelmLive reads the Helm releases of the cluster of Kubeconfig and KubeContext, in
	// HelmNamespace ("": every namespace).
	HelmLive                               bool
	Kubeconfig, KubeContext, HelmNamespace string
}

// RegisterFlags adds the flags to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.TargetVersion, "target-version", "", "Kubernetes `X.Y` you plan to run: exit 3 when a manifest uses something removed at or before it "+
		"(empty: the release after --current-version, else the newest release the catalogue judges)")
	fs.StringVar(&c.CurrentVersion, "current-version", "", "Kubernetes `X.Y` the cluster runs: manifests using what was removed at or before it are listed as failing now "+
		"(the cluster refuses them today), apart from what the upgrade breaks (empty with --helm-live: the apiserver's /version)")
	fs.Var(&c.TargetVersions, "target-versions", "releases of third-party components you plan to run, `COMPONENT=X.Y,...` (e.g. cert-manager=1.6,istio=1.22): exit 3 when a manifest uses a version of their CRDs removed at or before it (no release given: any removal)")
	fs.StringVar(&c.Format, "format", "json", "output format: json (one finding per line), table (fitted to the terminal, else $COLUMNS, else 120 columns), markdown, "+
		"sarif (SARIF 2.1.0, one result per finding at its file and line: error when it blocks --target-version, else warning) or "+
		"junit (JUnit XML, one test case per rule, API and object: failed when it blocks, else skipped)")
	fs.Var(&c.RulesFiles, "rules-file", "extra catalogue `files`, comma-separated or repeated, that add or override rules, APIs, annotations and labels")
	fs.IntVar(&c.MaxFileSize, "max-file-size", 64<<20, "largest manifest file read, in bytes; larger files are reported and skipped")
	fs.IntVar(&c.MaxDocumentSize, "max-document-size", 64<<20, "largest YAML or JSON document once decoded, aliases expanded, and largest Helm release once decompressed, in bytes (estimated before decoding); larger ones are reported and skipped")
	fs.BoolVar(&c.HelmLive, "helm-live", false, "also read the Helm 3 releases stored in the cluster of --kubeconfig (Secrets and ConfigMaps labelled owner=helm) and check their manifests")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig `file` for --helm-live (empty: $KUBECONFIG, else ~/.kube/config)")
	fs.StringVar(&c.KubeContext, "kube-context", "", "context of the kubeconfig for --helm-live (empty: its current context)")
	fs.StringVar(&c.HelmNamespace, "helm-namespace", "", "namespace whose Helm releases --helm-live reads (empty: every namespace)")
	fs.BoolVar(&c.HelmAllRevisions, "helm-all-revisions", false, "check every revision of a Helm release (in a List, or read from the cluster), not only the latest deployed one")
}

// Validate checks the flag values.
func (c *Config) Validate() error {
	if _, err := kubeversion.Parse(c.TargetVersion); err != nil && c.TargetVersion != "" {
		return fmt.Errorf("--target-version %q: want MAJOR.MINOR, e.g. 1.37", c.TargetVersion)
	}
	if _, err := kubeversion.Parse(c.CurrentVersion); err != nil && c.CurrentVersion != "" {
		return fmt.Errorf("--current-version %q: want MAJOR.MINOR, e.g. 1.36", c.CurrentVersion)
	}
	switch c.Format {
	case "json", "table", "markdown", "sarif", "junit":
	default:
		return fmt.Errorf("--format %q: want json, table, markdown, sarif or junit", c.Format)
	}
	if c.MaxFileSize < 1024 {
		return fmt.Errorf("--max-file-size %d: want at least 1024 bytes", c.MaxFileSize)
	}
	if c.MaxDocumentSize < 1024 {
		return fmt.Errorf("--max-document-size %d: want at least 1024 bytes", c.MaxDocumentSize)
	}
	return nil
}

// Finding is one JSON line: the finding of classify scan plus the manifest it came from.
type Finding struct {
	scan.JSONFinding
	Source string `json:"source"`
}

// Main runs `classify manifests` with args (after "manifests") and returns the exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("classify manifests", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	cfg.RegisterFlags(fs)
	flagenv.Usage(fs, synopsis)
	if err := flagenv.Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return scan.ExitClean
		}
		fmt.Fprintf(stderr, "classify manifests: %v\n", err)
		return scan.ExitError
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "classify manifests: %v\n", err)
		return scan.ExitError
	}
	if fs.NArg() == 0 && !cfg.HelmLive {
		fmt.Fprintln(stderr, "classify manifests: no input: give manifest files or directories, - for stdin, or --helm-live (see --help)")
		return scan.ExitError
	}
	cat, err := rules.Load(cfg.RulesFiles...)
	if err != nil {
		fmt.Fprintf(stderr, "classify manifests: %v\n", err)
		return scan.ExitError
	}
	c := &Checker{Engine: rules.NewEngine(cat), MaxDocumentSize: cfg.MaxDocumentSize, AllRevisions: cfg.HelmAllRevisions}
	width := scan.OutputWidth(stdout)
	w := bufio.NewWriter(stdout)
	// Checked by Validate; unset when empty.
	target, _ := kubeversion.Parse(cfg.TargetVersion)
	current, _ := kubeversion.Parse(cfg.CurrentVersion)
	currentWhy := "--current-version"
	live := LiveConfig{Kubeconfig: cfg.Kubeconfig, Context: cfg.KubeContext, Namespace: cfg.HelmNamespace, AllRevisions: cfg.HelmAllRevisions}
	if cfg.HelmLive && current.IsZero() {
		// the cluster read is the cluster judged: its release is the current one
		if current, currentWhy, err = ServerRelease(live); err != nil {
			fmt.Fprintf(stderr, "classify manifests: the cluster's release is unknown (--current-version gives it): %s\n", printable.String(err.Error()))
		} else if !target.IsZero() && !current.Less(target) {
			fmt.Fprintf(stderr, "classify manifests: the cluster runs %s, not a release before --target-version %s: judged against the target alone\n", current, target)
			current = kubeversion.Version{}
		}
	}
	up, err := scan.ResolveUpgrade(cat, current, target, currentWhy, cfg.CurrentVersion != "")
	if err != nil {
		fmt.Fprintf(stderr, "classify manifests: %v\n", err)
		return scan.ExitError
	}
	up.Components = cfg.TargetVersions
	out := &output{cfg: cfg, up: up, w: w, cat: cat}
	report := func(name string, err error) {
		// one line each, naming the input: errors.Join puts several on lines of their own
		for _, line := range strings.Split(err.Error(), "\n") {
			if name != "" {
				line = name + ": " + line
			}
			fmt.Fprintf(stderr, "classify manifests: %s\n", printable.String(line))
		}
	}
	for _, path := range fs.Args() {
		err := walk(path, stdin, cfg.MaxFileSize, func(name string, data []byte) {
			out.files++
			var found []pending
			docs, err := c.CheckAt(name, data, func(at Location, f *auditlensv1.Finding) {
				if path == "-" {
					at.File = "" // stdin is no file
				}
				found = append(found, pending{at, f})
			})
			if err != nil && isTemplate(data) {
				out.templates++
				fmt.Fprintf(stderr, "classify manifests: %s: a template (it holds {{ }} actions and is not YAML): skipped; "+
					"check what it renders to with: helm template RELEASE CHART | classify manifests -\n", printable.String(name))
				return
			}
			out.docs += docs
			for _, p := range found {
				out.emit(p.at, p.f)
			}
			if err != nil {
				out.failed++
				report(name, err)
			}
		})
		if err != nil {
			out.failed++
			report("", err)
		}
	}
	if cfg.HelmLive {
		var found []pending
		releases, docs, errs := c.CheckLive(context.Background(), live, func(source string, f *auditlensv1.Finding) {
			found = append(found, pending{Location{Source: source}, f}) // in the cluster: no file
		})
		out.releases, out.docs = releases, out.docs+docs
		for _, p := range found {
			out.emit(p.at, p.f)
		}
		if len(errs) > 0 {
			out.failed++
			report("--helm-live", errors.Join(errs...))
		}
	}
	out.olderRevisions = c.OlderRevisions
	if err := out.flush(width); err != nil {
		fmt.Fprintf(stderr, "classify manifests: write output: %v\n", err)
		return scan.ExitError
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintf(stderr, "classify manifests: write output: %v\n", err)
		return scan.ExitError
	}
	if cfg.Format != "markdown" { // markdown carries its summary on stdout: not twice
		fmt.Fprintf(stderr, "classify manifests: %s\n", out.summary())
	}
	switch {
	case out.blocking > 0:
		return scan.ExitRemoved // what blocks is reported even when some input could not be read
	case out.failed > 0:
		return scan.ExitError
	case out.findings > 0:
		return scan.ExitFindings
	}
	return scan.ExitClean
}

type pending struct {
	at Location
	f  *auditlensv1.Finding
}

// isTemplate reports whether data looks like a template (Helm's, or any Go template) rather
// than a manifest: it holds a {{ ... }} action. Only asked of files that did not parse: a
// manifest may hold {{ }} in its strings (alerting rules do).
func isTemplate(data []byte) bool {
	i := bytes.Index(data, []byte("{{"))
	return i >= 0 && bytes.Contains(data[i:], []byte("}}"))
}

type output struct {
	cfg  Config
	up   scan.Upgrade // its zero target: any removal blocks
	w    io.Writer
	grid *scan.Grid
	// files and documents read, templates skipped, inputs that failed (wholly or in part)
	files, docs, templates, failed int
	findings, blocking             int
	failingNow                     int // of blocking: removed at or before the current release
	olderRevisions                 int // Helm revisions left out
	releases                       int // Helm releases read from the cluster
	cat                            *rules.Catalogue
	ci                             []scan.CIResult // --format sarif and junit: written by flush
}

func (o *output) emit(at Location, f *auditlensv1.Finding) {
	source := at.Source
	o.findings++
	breaks := o.up.Of(f.RemovedIn)
	if breaks != scan.NotBlocking {
		o.blocking++
	}
	if breaks == scan.FailingNow {
		o.failingNow++
	}
	obj := f.Name
	if f.Namespace != "" {
		obj = f.Namespace + "/" + f.Name
	}
	api := strings.TrimSpace(strings.TrimPrefix(f.ApiGroup+"/", "/") + f.ApiVersion + " " + f.Resource)
	switch o.cfg.Format {
	case "sarif", "junit":
		o.ci = append(o.ci, ciResult(at, f, breaks, o.up, api, obj))
	case "table":
		if o.grid == nil {
			o.grid = &scan.Grid{Columns: []scan.Column{{Name: "SOURCE", Min: 8}, {Name: "SEVERITY", Min: 8}, {Name: "RULE", Min: 8},
				{Name: "REMOVED", Min: 7}, {Name: "API", Min: 10}, {Name: "OBJECT", Min: 8}}}
		}
		p := printable.String
		o.grid.AddNoted(p(f.Message), p(source), scan.SeverityName(f.Severity), p(f.RuleId), dash(p(f.RemovedIn)), p(api), p(dash(obj)))
	case "markdown":
		if o.findings == 1 {
			fmt.Fprint(o.w, "## Findings\n\n| Source | Severity | Rule | Removed in | API | Object | Message |\n|---|---|---|---|---|---|---|\n")
		}
		c := scan.MarkdownCode
		fmt.Fprintf(o.w, "| %s | %s | %s | %s | %s | %s | %s |\n", c(source), scan.SeverityName(f.Severity), c(f.RuleId), c(f.RemovedIn),
			c(api), c(obj), c(f.Message))
	default:
		b, err := json.Marshal(Finding{JSONFinding: scan.ToJSON(f), Source: source})
		if err == nil {
			b = append(b, '\n')
			_, _ = o.w.Write(b)
		}
	}
}

// flush writes what the format holds back: the table, fitted to width, and the markdown
// summary.
func (o *output) flush(width int) error {
	switch o.cfg.Format {
	case "table":
		if o.grid != nil {
			return o.grid.Write(o.w, width)
		}
	case "markdown":
		if o.findings == 0 {
			fmt.Fprint(o.w, "## Findings\n\nNone.\n")
		}
		_, err := fmt.Fprintf(o.w, "\n## Summary\n\n%s.\n", o.summary())
		return err
	case "sarif":
		return scan.WriteSARIF(o.w, o.cat, o.ci)
	case "junit":
		blocks := "blocks an upgrade to " + o.up.Name()
		if o.up.Target.IsZero() {
			blocks = "removed in some release (no target: any removal blocks)"
		}
		return scan.WriteJUnit(o.w, scan.JUnit{Suite: "classify manifests", Blocks: blocks, InputErrors: o.failed}, o.ci)
	}
	return nil
}

// ciResult is one finding as a SARIF result and JUnit test case: at the file and line of
// its object's document, about the object (its name, and its source in fullyQualifiedName).
func ciResult(at Location, f *auditlensv1.Finding, breaks scan.Breaks, up scan.Upgrade, api, obj string) scan.CIResult {
	msg := f.Message
	if f.Replacement != "" && !strings.Contains(strings.ToLower(msg), strings.ToLower(f.Replacement)) {
		msg += " Use instead: " + f.Replacement + "."
	}
	if breaks == scan.FailingNow {
		msg += fmt.Sprintf(" Failing now: removed at or before %s, the cluster's release (it refuses this manifest today).", up.Current)
	}
	name := obj
	if name == "" {
		name = "(unnamed)"
	}
	if api == "" {
		api = "(no API)"
	}
	props := map[string]any{"source": at.Source, "api": api, "severity": scan.SeverityName(f.Severity), "failingNow": breaks == scan.FailingNow}
	for k, v := range map[string]string{"name": f.Name, "namespace": f.Namespace, "removedIn": f.RemovedIn,
		"deprecatedIn": f.DeprecatedIn, "replacement": f.Replacement} {
		if v != "" {
			props[k] = v
		}
	}
	return scan.CIResult{
		RuleID: f.RuleId, Severity: scan.SeverityName(f.Severity), Blocking: breaks != scan.NotBlocking, Message: msg,
		File: at.File, Line: at.Line,
		Logical:    &scan.SARIFLogicalLocation{Name: name, FullyQualifiedName: at.Source, Kind: "resource"},
		Case:       api + " " + name + " (" + at.Source + ")",
		Properties: props,
	}
}

// summary counts what was read and found, and what could not be read.
func (o *output) summary() string {
	u := o.up
	blocking := "on something already removed in some release"
	switch {
	case u.Current.IsZero() && !u.Target.IsZero():
		blocking = "blocking an upgrade to " + u.Target.String()
	case !u.Target.IsZero():
		blocking = fmt.Sprintf("blocking an upgrade from %s to %s (%d new in %s, %d failing now: removed at or before %s)",
			u.Current, u.Target, o.blocking-o.failingNow, u.Target, o.failingNow, u.Current)
	}
	s := fmt.Sprintf("%d document%s in %d file%s, %d finding%s, %d %s",
		o.docs, plural(o.docs), o.files, plural(o.files), o.findings, plural(o.findings), o.blocking, blocking)
	if !u.Current.IsZero() && u.CurrentWhy != "--current-version" {
		s += "; the cluster runs " + u.Current.String() + ": " + u.CurrentWhy
	}
	if !u.Target.IsZero() && u.TargetWhy != "--target-version" {
		s += "; target " + u.Target.String() + ": " + u.TargetWhy
	}
	if o.failed > 0 {
		s += fmt.Sprintf("; %d input%s not read in full (see the errors above)", o.failed, plural(o.failed))
	}
	if o.cfg.HelmLive {
		s += fmt.Sprintf("; %d Helm release%s read from the cluster", o.releases, plural(o.releases))
	}
	if o.olderRevisions > 0 {
		s += fmt.Sprintf("; %d older Helm revision%s left out (--helm-all-revisions)", o.olderRevisions, plural(o.olderRevisions))
	}
	if o.templates > 0 {
		s += fmt.Sprintf("; %d template%s skipped", o.templates, plural(o.templates))
	}
	return s
}

// walk calls fn with the bytes of path: a file, every manifest file below a directory (in
// lexical order), or stdin for "-".
func walk(path string, stdin io.Reader, max int, fn func(name string, data []byte)) error {
	read := func(name string, r io.Reader) error {
		data, err := io.ReadAll(io.LimitReader(r, int64(max)+1))
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		if len(data) > max {
			return fmt.Errorf("%s: larger than --max-file-size %d: skipped", name, max)
		}
		fn(name, data)
		return nil
	}
	if path == "-" {
		return read("stdin", stdin)
	}
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("read manifests: %w", err)
	}
	if !st.IsDir() {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("read manifests: %w", err)
		}
		defer f.Close()
		return read(path, f)
	}
	var errs []error
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			errs = append(errs, fmt.Errorf("read manifests: %w", err))
			return nil
		}
		if d.IsDir() || !isManifest(p) {
			return nil
		}
		f, err := openRegular(p)
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		defer f.Close()
		if err := read(p, f); err != nil {
			errs = append(errs, err)
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// openRegular opens p, found in a directory, when it is a regular file (or a link to one).
// It opens without blocking and then checks what it opened: a FIFO named *.yaml would block
// an open for reading until a writer came, and a device or socket is no manifest. (A pipe
// named on the command line, such as <(helm template ...), is read: it was asked for.)
func openRegular(p string) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("read manifests: %w", err)
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%s: not a regular file (%s): skipped", p, st.Mode().Type())
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func isManifest(p string) bool {
	switch strings.ToLower(filepath.Ext(p)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// Checker runs the rule engine over manifests.
type Checker struct {
	Engine *rules.Engine
	// MaxDocumentSize bounds a document once decoded, aliases expanded, and a Helm release
	// once decompressed (0: 64 MiB).
	MaxDocumentSize int
	// AllRevisions checks every revision of a Helm release in a List, not only the latest
	// deployed one; OlderRevisions counts the revisions left out.
	AllRevisions   bool
	OlderRevisions int
	dec            *auditevent.Decoder
}

// Check classifies every document of one file (name is what findings' source says) and
// returns how many documents it read. A document that is not a Kubernetes object is an error
// naming it; the other documents are still checked.
func (c *Checker) Check(name string, data []byte, emit func(source string, f *auditlensv1.Finding)) (int, error) {
	return c.CheckAt(name, data, func(at Location, f *auditlensv1.Finding) { emit(at.Source, f) })
}

// Location is where the object of a finding is.
type Location struct {
	// Source is what the finding's source says: the file and document (name#N), an item of a
	// List (name#N.items[I]), a document of a Helm release stored in one (then followed by the
	// release and its own document).
	Source string
	// File is the file the object is in, as named to CheckAt ("" for a release read from a
	// cluster), and Line the line its document starts on there: the first line of the
	// document that is neither blank nor a comment, counted from 1. The items of a List and
	// the documents of a Helm release stored in a file are at the line of the document that
	// holds them. 0: unknown.
	File string
	Line int
}

// CheckAt is Check, with each finding's Location: the file name and the line its document
// starts on, as well as its source.
func (c *Checker) CheckAt(name string, data []byte, emit func(at Location, f *auditlensv1.Finding)) (int, error) {
	return c.check(name, data, emit, true, nil)
}

// check is CheckAt; helm says whether Helm release storage is opened (not inside a release),
// and outer, for the manifest of a release, is where the release is stored (nil: data is the
// file name).
func (c *Checker) check(name string, data []byte, emit func(Location, *auditlensv1.Finding), helm bool, outer *Location) (int, error) {
	if c.dec == nil {
		c.dec = auditevent.NewDecoder(0)
	}
	var errs []error
	docs := 0
	for n, chunk := range splitDocuments(data) {
		n++
		doc, err := decodeDocument(chunk.data, c.maxSize())
		if err != nil {
			errs = append(errs, fmt.Errorf("document %d (line %d): %w", n, chunk.line, err))
			continue
		}
		if doc == nil {
			continue
		}
		obj, ok := doc.(map[string]any)
		if !ok {
			errs = append(errs, fmt.Errorf("document %d: not a Kubernetes object (a YAML %T)", n, doc))
			continue
		}
		source := name + "#" + strconv.Itoa(n)
		at := Location{File: name, Line: chunk.line}
		if outer != nil {
			at = Location{File: outer.File, Line: outer.Line}
		}
		if kind, _ := obj["kind"].(string); kind == "List" || strings.HasSuffix(kind, "List") && obj["items"] != nil {
			items, _ := obj["items"].([]any)
			latest := c.latestRevisions(items)
			for i, it := range items {
				m, ok := it.(map[string]any)
				if !ok {
					errs = append(errs, fmt.Errorf("document %d: items[%d]: not a Kubernetes object", n, i))
					continue
				}
				if latest != nil && !latest[i] {
					c.OlderRevisions++
					continue
				}
				at.Source = source + ".items[" + strconv.Itoa(i) + "]"
				k, err := c.objectOrRelease(m, at, emit, helm)
				docs += k
				if err != nil {
					errs = append(errs, fmt.Errorf("document %d: items[%d]: %w", n, i, err))
				}
			}
			continue
		}
		at.Source = source
		k, err := c.objectOrRelease(obj, at, emit, helm)
		docs += k
		if err != nil {
			errs = append(errs, fmt.Errorf("document %d: %w", n, err))
		}
	}
	return docs, errors.Join(errs...)
}

func (c *Checker) maxSize() int {
	if c.MaxDocumentSize <= 0 {
		return 64 << 20
	}
	return c.MaxDocumentSize
}

// objectOrRelease checks obj and, when it is Helm release storage, the manifest of its
// release, each document named after the release. It returns the documents checked.
func (c *Checker) objectOrRelease(obj map[string]any, at Location, emit func(Location, *auditlensv1.Finding), helm bool) (int, error) {
	if err := c.object(obj, at, emit); err != nil {
		return 1, err
	}
	encoded, secret, ok := helmStorage(obj)
	if !ok || !helm {
		return 1, nil
	}
	r, err := DecodeRelease(encoded, secret, c.maxSize())
	if err != nil {
		return 1, err
	}
	docs, err := c.checkRelease(at.Source+" "+r.Source(), r, emit, &at)
	return 1 + docs, err
}

// CheckRelease checks the manifest of a Helm release; its documents are named source#N.
func (c *Checker) CheckRelease(source string, r *Release, emit func(string, *auditlensv1.Finding)) (int, error) {
	return c.checkRelease(source, r, func(at Location, f *auditlensv1.Finding) { emit(at.Source, f) }, &Location{})
}

// checkRelease is CheckRelease; stored is where the release is stored (its findings'
// location in a file).
func (c *Checker) checkRelease(source string, r *Release, emit func(Location, *auditlensv1.Finding), stored *Location) (int, error) {
	docs, err := c.check(source, []byte(r.Manifest), emit, false, stored)
	if err != nil {
		return docs, fmt.Errorf("%s: %w", r.Source(), err)
	}
	return docs, nil
}

// latestRevisions marks, among the items of a List, the Helm release storage to check: the
// latest deployed revision of each release (the latest revision when none is deployed), and
// every item that is no release storage. Nil: check every item (AllRevisions, or no release
// storage in the List).
func (c *Checker) latestRevisions(items []any) map[int]bool {
	if c.AllRevisions {
		return nil
	}
	type best struct {
		item, revision int
		deployed       bool
	}
	bests := map[string]best{}
	keep := map[int]bool{}
	found := false
	for i, it := range items {
		m, _ := it.(map[string]any)
		if _, _, ok := helmStorage(m); !ok {
			keep[i] = true
			continue
		}
		found = true
		meta, _ := m["metadata"].(map[string]any)
		labels := map[string]string{}
		if l, ok := meta["labels"].(map[string]any); ok {
			for k, v := range l {
				labels[k], _ = v.(string)
			}
		}
		ns, _ := meta["namespace"].(string)
		key := ns + "/" + labels["name"]
		b := best{item: i, revision: revisionLabel(labels), deployed: labels["status"] == "deployed"}
		if cur, ok := bests[key]; !ok || b.deployed && !cur.deployed || b.deployed == cur.deployed && b.revision > cur.revision {
			bests[key] = b
		}
	}
	if !found {
		return nil
	}
	for _, b := range bests {
		keep[b.item] = true
	}
	return keep
}

type document struct {
	data []byte
	line int // where it starts in the file
}

// splitDocuments cuts a YAML stream at its document markers ("---" lines, "..." ends) and
// drops the documents that hold nothing but comments and blank lines, so document N is the
// Nth object of the file, however helm or an editor placed the markers.
func splitDocuments(data []byte) []document {
	var out []document
	var cur []byte
	start, content := 1, false
	flush := func() {
		if content {
			out = append(out, document{cur, start})
		}
		cur, content = nil, false
	}
	for n, line := range bytes.SplitAfter(data, []byte("\n")) {
		t := bytes.TrimRight(line, " \t\r\n")
		if bytes.Equal(t, []byte("---")) || bytes.HasPrefix(t, []byte("--- ")) || bytes.HasPrefix(t, []byte("---\t")) || bytes.Equal(t, []byte("...")) {
			flush()
			start = n + 2
			if rest := bytes.TrimSpace(t[3:]); len(rest) > 0 && rest[0] != '#' && !bytes.Equal(t, []byte("...")) {
				cur, content = append(cur, rest...), true // "--- {a: 1}": content on the marker line
				cur = append(cur, '\n')
				start = n + 1
			}
			continue
		}
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 && trimmed[0] != '#' {
			if !content {
				start = n + 1
			}
			content = true
		}
		cur = append(cur, line...)
	}
	flush()
	return out
}

// object classifies one manifest as the request that would create it: an audit event at
// Request level whose objectRef names its group, version and resource and whose requestObject
// is the manifest. The findings keep the object's fields and leave the audit fields empty.
func (c *Checker) object(obj map[string]any, at Location, emit func(Location, *auditlensv1.Finding)) error {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	if apiVersion == "" || kind == "" {
		return errors.New("not a Kubernetes object: no apiVersion or kind")
	}
	group, version, ok := strings.Cut(apiVersion, "/")
	if !ok {
		group, version = "", apiVersion
	}
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	namespace, _ := meta["namespace"].(string)
	body, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("not a Kubernetes object: %w", err)
	}
	ev, err := json.Marshal(map[string]any{
		"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Request", "auditID": "manifest", "stage": "ResponseComplete",
		"verb": "create",
		"objectRef": map[string]any{
			"resource": c.Engine.ResourceOf(group, version, kind), "apiGroup": group, "apiVersion": version,
			"name": name, "namespace": namespace,
		},
		"requestObject": json.RawMessage(body),
	})
	if err != nil {
		return err
	}
	var matches []rules.Match
	return c.dec.Decode(ev, func(e *auditevent.Event) error {
		matches = onePSPFinding(c.Engine.Classify(e, matches[:0]), apiVersion, kind, name)
		for i := range matches {
			f := c.Engine.FindingFrom(e, &matches[i], "", "", at.Source)
			f.AuditId, f.Verb, f.Stage = "", "", ""
			f.Evidence = manifestEvidence(f.Evidence, apiVersion, kind)
			emit(at, f)
		}
		return nil
	})
}

// onePSPFinding words a PodSecurityPolicy manifest's finding for a manifest: the psp rule
// (which says what to do instead; the engine already made it the request's one finding),
// without the request's verb, which a manifest does not have.
func onePSPFinding(matches []rules.Match, apiVersion, kind, name string) []rules.Match {
	psp := slices.IndexFunc(matches, func(m rules.Match) bool { return m.Rule != nil && m.Rule.ID == rules.PSP })
	if psp < 0 {
		return matches
	}
	m := &matches[psp]
	m.Detail, m.Value = "a manifest declares "+apiVersion+" "+kind+" "+name, ""
	m.Evidence = slices.DeleteFunc(m.Evidence, func(e rules.Evidence) bool { return e.Path == "verb" })
	return matches
}

// manifestEvidence rewrites the evidence paths of the synthetic audit event into paths of the
// manifest: objectRef's group and version are its apiVersion, its resource is its kind, and
// requestObject is the manifest itself.
func manifestEvidence(ev []*auditlensv1.Evidence, apiVersion, kind string) []*auditlensv1.Evidence {
	out := ev[:0]
	seenAPIVersion := false
	for _, e := range ev {
		switch {
		case e.Path == "objectRef.apiGroup" || e.Path == "objectRef.apiVersion":
			if seenAPIVersion {
				continue
			}
			seenAPIVersion = true
			e.Path, e.Value = "apiVersion", apiVersion
		case e.Path == "objectRef.resource":
			e.Path, e.Value = "kind", kind
		case strings.HasPrefix(e.Path, "requestObject."):
			e.Path = strings.TrimPrefix(e.Path, "requestObject.")
		}
		out = append(out, e)
	}
	return out
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
