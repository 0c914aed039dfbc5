// Package scan is `classify scan`: classify audit log files offline, without a bus, and say
// what blocks an upgrade.
package scan

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/flagenv"
	"github.com/auditlens/auditlens/lib/kubeversion"
	"github.com/auditlens/auditlens/lib/printable"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/classify/dedup"
	"github.com/auditlens/auditlens/services/classify/rules"
)

// Exit codes (DESIGN.md).
const (
	ExitClean    = 0 // no findings
	ExitError    = 1 // a file could not be read, a flag was wrong
	ExitFindings = 2 // only deprecations and hygiene findings
	ExitRemoved  = 3 // something removed at or before the target version is in use
)

const synopsis = `usage: classify scan [flags] FILE...

Classifies kube-apiserver audit logs (JSON lines of audit.k8s.io/v1 or v1beta1 Events or
EventLists; plain, gzip, or - for stdin) without a bus. Findings go to stdout: one JSON object
per line (--format json), a table fitted to the terminal (table: the width of the terminal,
else $COLUMNS, else 120; long values cut with "…"), the same with every value in full (wide),
a GitHub Markdown table for pull requests and tickets (markdown), or a document for CI:
SARIF 2.1.0 for code scanning (sarif) or a JUnit XML report (junit). sarif and junit group the
findings by rule, API and caller (user and user agent): one SARIF result or JUnit test case
each, with the number of requests and the file and line of the first (a million requests by
one caller are one result); a SARIF result is an error when it blocks --target-version, else
a warning; a JUnit test case fails when it blocks and is skipped when it does not. The
summary, by rule, API and caller or by caller (--group-by), goes to stderr for json, sarif and
junit (stdout then holds only the findings) and to stdout for the others. Exit status: 0 no findings, 2 only deprecations and hygiene, 3 an API or feature removed at or
before --target-version is in use, 1 an error.`

// Config holds the scan flags.
type Config struct {
	TargetVersion string
	// CurrentVersion is the release the cluster runs, when the log cannot tell it.
	CurrentVersion string
	// TargetVersions are the releases of third-party components judged against.
	TargetVersions ComponentTargets
	Format         string
	GroupBy        string
	RulesFiles     flagenv.StringList
	Cluster        string
	MaxEventSize   int
	DedupWindow    int
	Progress       string
	MaxBadReports  int
	Parallel       int
}

// RegisterFlags adds the scan flags to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.TargetVersion, "target-version", "", "Kubernetes `X.Y` you plan to run: exit 3 when something removed at or before it is used "+
		"(empty: the release after the cluster's, else the newest release the catalogue judges)")
	fs.StringVar(&c.CurrentVersion, "current-version", "", "Kubernetes `X.Y` the cluster runs: what was removed at or before it is listed as failing now, apart from what the upgrade breaks "+
		"(empty: read from the control plane's user agents in the log, kube-apiserver/v1.x as system:apiserver and the like)")
	fs.Var(&c.TargetVersions, "target-versions", "releases of third-party components you plan to run, `COMPONENT=X.Y,...` (e.g. cert-manager=1.6,istio=1.22): a removed version of their CRDs blocks when removed at or before it (no release given: any removal)")
	fs.StringVar(&c.Format, "format", "json", "output format: json (one finding per line), table (fitted to the terminal), wide (every value in full), markdown, "+
		"sarif (SARIF 2.1.0, one result per rule, API and caller with its count: error when it blocks --target-version, else warning) or "+
		"junit (JUnit XML, one test case per rule, API and caller: failed when it blocks, else skipped)")
	fs.StringVar(&c.GroupBy, "group-by", "api", "summary grouped by api (rule, API, then callers) or by caller (caller, then rules and APIs)")
	fs.Var(&c.RulesFiles, "rules-file", "extra catalogue `files`, comma-separated or repeated, that add or override rules, APIs, annotations and labels")
	fs.StringVar(&c.Cluster, "cluster", "default", "cluster name put in findings")
	fs.IntVar(&c.MaxEventSize, "max-event-size", 4<<20, "largest line accepted, in bytes; longer lines are reported and skipped")
	fs.IntVar(&c.DedupWindow, "dedup-window", dedup.DefaultSize, "finding keys remembered to merge the stages of one request")
	fs.StringVar(&c.Progress, "progress", "auto", "progress bar on stderr: auto (on a terminal), always or never")
	fs.IntVar(&c.MaxBadReports, "max-bad-reports", 20, "bad lines reported one by one; the rest are counted")
	fs.IntVar(&c.Parallel, "parallel", 0, "goroutines classifying at once: the input is cut at line boundaries into chunks classified in parallel, with the same output in the same order (0: one per core; 1: one, reading as it goes)")
}

// Validate checks the flag values.
func (c *Config) Validate() error {
	if _, err := kubeversion.Parse(c.TargetVersion); err != nil && c.TargetVersion != "" {
		return fmt.Errorf("--target-version %q: want MAJOR.MINOR, e.g. 1.25", c.TargetVersion)
	}
	if _, err := kubeversion.Parse(c.CurrentVersion); err != nil && c.CurrentVersion != "" {
		return fmt.Errorf("--current-version %q: want MAJOR.MINOR, e.g. 1.37", c.CurrentVersion)
	}
	switch c.Format {
	case "json", "table", "wide", "markdown", "sarif", "junit":
	default:
		return fmt.Errorf("--format %q: want json, table, wide, markdown, sarif or junit", c.Format)
	}
	if c.GroupBy != "api" && c.GroupBy != "caller" {
		return fmt.Errorf("--group-by %q: want api or caller", c.GroupBy)
	}
	if c.Progress != "auto" && c.Progress != "always" && c.Progress != "never" {
		return fmt.Errorf("--progress %q: want auto, always or never", c.Progress)
	}
	if c.DedupWindow < 0 {
		return fmt.Errorf("--dedup-window %d: want a number of keys, 0 or more (below 2: the default, %d)", c.DedupWindow, dedup.DefaultSize)
	}
	if c.MaxBadReports < 0 {
		return fmt.Errorf("--max-bad-reports %d: want 0 or more (0: count bad lines without reporting them)", c.MaxBadReports)
	}
	if c.Parallel < 0 {
		return fmt.Errorf("--parallel %d: want 0 or more (0: one per core)", c.Parallel)
	}
	if c.MaxEventSize < 1024 {
		return fmt.Errorf("--max-event-size %d: want at least 1024 bytes", c.MaxEventSize)
	}
	return nil
}

// Main runs `classify scan` with args (after "scan") and returns the exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	s, files, code := newScanner(args, stdout, stderr)
	if s == nil {
		return code
	}
	return s.run(files, stdin)
}

// newScanner parses args and loads the catalogue: the scanner and its inputs, or nil and the
// exit code.
func newScanner(args []string, stdout, stderr io.Writer) (*scanner, []string, int) {
	fs := flag.NewFlagSet("classify scan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	cfg.RegisterFlags(fs)
	flagenv.Usage(fs, synopsis)
	if err := flagenv.Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, nil, ExitClean
		}
		fmt.Fprintf(stderr, "classify scan: %v\n", err)
		return nil, nil, ExitError
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "classify scan: %v\n", err)
		return nil, nil, ExitError
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "classify scan: no input: give audit log files, or - for stdin (see --help)")
		return nil, nil, ExitError
	}
	cat, err := rules.Load(cfg.RulesFiles...)
	if err != nil {
		fmt.Fprintf(stderr, "classify scan: %v\n", err)
		return nil, nil, ExitError
	}
	// Checked by Validate; unset when empty.
	target, _ := kubeversion.Parse(cfg.TargetVersion)
	current, _ := kubeversion.Parse(cfg.CurrentVersion)
	if _, err := ResolveUpgrade(cat, current, target, "--current-version", !current.IsZero()); err != nil {
		fmt.Fprintf(stderr, "classify scan: %v\n", err)
		return nil, nil, ExitError
	}
	s := &scanner{
		cfg: cfg, target: target, current: current, engine: rules.NewEngine(cat), stdout: bufio.NewWriterSize(stdout, 64<<10), stderr: stderr,
		seen: dedup.New(cfg.DedupWindow), badReasons: map[string]int{}, width: outputWidth(stdout, os.Getenv),
	}
	switch cfg.Format {
	case "json":
		s.enc = newJSONLines()
	case "table":
		s.fitted = newFittedTable(s.stdout, s.width)
		s.rows = s.fitted
	case "wide":
		s.rows = newWideTable(s.stdout)
	case "markdown":
		s.rows = &markdownTable{w: s.stdout}
	case "sarif", "junit":
		s.ci = &ciReport{}
		s.stdinGiven = slices.Contains(fs.Args(), "-")
	}
	return s, fs.Args(), 0
}

// scanner is one run of scan: its inputs are read and classified by workers (worker.go), in
// this goroutine or in parallel (parallel.go); the findings they give are de-duplicated,
// counted and written here, in input order.
type scanner struct {
	cfg Config
	// target and current are the flags' (zero: not given); up is the upgrade judged, once
	// the input is read (the cluster's release may come from it).
	target, current kubeversion.Version
	up              Upgrade
	engine          *rules.Engine
	seen            *dedup.Window
	stdout          *bufio.Writer
	stderr          io.Writer
	width           int          // of the table and its summary (--format table)
	enc             *jsonLines   // --format json
	rows            rowWriter    // the other formats
	fitted          *fittedTable // --format table: rows, to tell whether something was cut
	ci              *ciReport    // --format sarif and junit: written at the end
	// stdinGiven: "-" is an input (--format sarif and junit: the input named stdin is no file).
	stdinGiven bool

	workers []*worker // their counts are added up in the summary
	// chunks and peakChunks count the chunks held in memory (--parallel above 1).
	chunks, peakChunks atomic.Int64
	freeChunks         chan *chunk
	sum                summary
	findings           int
	// blocking counts the findings that block the upgrade, failingNow those of them removed
	// at or before the cluster's release (set by judge).
	blocking, failingNow int
	events               atomic.Int64
	bytesRead            atomic.Int64
	badLines             int
	badReasons           map[string]int
	failed               bool
	failedInputs         int
}

func (s *scanner) run(files []string, stdin io.Reader) int {
	var total int64
	for _, f := range files {
		if f == "-" {
			total = -1
			break
		}
		if st, err := os.Stat(f); err == nil && st.Mode().IsRegular() {
			total += st.Size()
		}
	}
	stopProgress := s.startProgress(total)
	start := time.Now()
	if n := s.parallelism(); n > 1 {
		s.runParallel(files, stdin, n)
	} else {
		w := s.newWorker(s)
		for _, f := range files {
			if err := s.input(f, stdin, w.read); err != nil {
				s.inputFailed(err)
			}
		}
		w.flushEvents()
	}
	stopProgress()
	s.judge()
	if s.rows != nil {
		s.rows.flush()
	}
	if s.ci != nil {
		if err := s.writeCI(s.stdout); err != nil {
			fmt.Fprintf(s.stderr, "classify scan: write output: %v\n", err)
			return ExitError
		}
	}
	if err := s.stdout.Flush(); err != nil {
		fmt.Fprintf(s.stderr, "classify scan: write output: %v\n", err)
		return ExitError
	}
	if s.cfg.Format == "json" || s.ci != nil {
		// stdout holds only the findings, for a program to read.
		s.writeSummary(s.stderr, len(files), time.Since(start))
	} else {
		s.writeSummary(s.stdout, len(files), time.Since(start))
		_ = s.stdout.Flush()
	}
	switch {
	case s.failed:
		return ExitError
	case s.events.Load() == 0:
		// "0 findings" of an input that held no audit event is no verdict: a CI step pointed at
		// the wrong file (README.md, an empty file, another JSON log) must not pass.
		fmt.Fprintf(s.stderr, "classify scan: no audit event in the input (%d bad line%s): nothing was checked; give kube-apiserver audit log files (JSON lines of audit.k8s.io Events)\n",
			s.badLines, plural(s.badLines))
		return ExitError
	case s.blocking > 0:
		return ExitRemoved
	case s.findings > 0:
		return ExitFindings
	}
	return ExitClean
}

// parallelism is the number of workers: --parallel, 0 being one per core.
func (s *scanner) parallelism() int {
	if s.cfg.Parallel == 0 {
		return runtime.GOMAXPROCS(0)
	}
	return s.cfg.Parallel
}

func (s *scanner) inputFailed(err error) {
	fmt.Fprintf(s.stderr, "classify scan: %s\n", printable.String(err.Error()))
	s.failed = true
	s.failedInputs++
}

// match is the sink of the worker that runs in this goroutine (--parallel 1): a finding is
// built only for a match not seen before.
func (s *scanner) match(ev *auditevent.Event, m *rules.Match, at position) {
	if s.seen.FirstTime(dedup.Key(s.cfg.Cluster, m.AuditID(ev.AuditID), m.Rule.ID, m.RequestReceived(ev))) {
		s.emit(s.engine.Finding(ev, m, s.cfg.Cluster, ""), nil, at)
	}
}

// bad reports a bad line, or a bad item of one: the first --max-bad-reports one by one, all
// counted by reason.
func (s *scanner) bad(pos string, err error) {
	s.badLines++
	reason := "other"
	for _, e := range []error{auditevent.ErrNotJSON, auditevent.ErrInvalidUTF8, auditevent.ErrTooLarge, auditevent.ErrNotAuditEvent, auditevent.ErrEmptyEventList} {
		if errors.Is(err, e) {
			reason = e.Error()
		}
	}
	s.badReasons[reason]++
	if s.badLines <= s.cfg.MaxBadReports {
		fmt.Fprintf(s.stderr, "classify scan: %s: skipped: %s\n", printable.String(pos), printable.String(err.Error()))
	}
}

// Blocks reports whether removedIn is at or before target (unset target: any removal; a
// removal release that does not parse blocks too).
func Blocks(removedIn string, target kubeversion.Version) bool {
	if removedIn == "" {
		return false
	}
	removed, err := kubeversion.Parse(removedIn)
	return err != nil || target.IsZero() || !target.Less(removed)
}

// judge chooses the upgrade once the input is read, the cluster's release from the flag or
// from the control plane's user agents the workers saw, and judges the findings against it.
func (s *scanner) judge() {
	current, why := s.current, "--current-version"
	if current.IsZero() {
		var cp kubeversion.ControlPlane
		for _, w := range s.workers {
			cp.Merge(&w.controlPlane)
		}
		current, why = cp.Version(), controlPlaneWhy(&cp)
	}
	// The flags were checked when the scan began; a release read from the log is not
	// checked against the target (a target before it leaves everything failing now).
	s.up, _ = ResolveUpgrade(s.engine.Catalogue(), current, s.target, why, false)
	s.up.Components = s.cfg.TargetVersions
	breaks, failing := s.sum.judge(s.up)
	s.blocking, s.failingNow = breaks+failing, failing
}

// controlPlaneWhy names the sighting the cluster's release was read from.
func controlPlaneWhy(cp *kubeversion.ControlPlane) string {
	s, ok := kubeversion.CurrentSighting(cp.Sightings())
	if !ok {
		return ""
	}
	return fmt.Sprintf("the %s user agent of %s", s.Component, s.At.UTC().Format(time.RFC3339))
}

// emit counts and writes a finding; line is its JSON line when a worker has encoded it
// already (--format json in parallel), else nil; at is the line of the input it is on.
func (s *scanner) emit(f *auditlensv1.Finding, line []byte, at position) {
	s.findings++
	s.sum.add(f)
	if s.ci != nil {
		s.ci.add(f, at)
		return
	}
	if s.rows != nil {
		s.rows.row(f)
		return
	}
	if line == nil {
		line = s.enc.encode(f)
	}
	_, _ = s.stdout.Write(line)
}
