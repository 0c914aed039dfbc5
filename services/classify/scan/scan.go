// Package scan is `classify scan`: classify audit log files offline, without a bus, and say
// what blocks an upgrade.
package scan

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
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
EventLists; plain, gzip, or - for stdin) without a bus. Findings go to stdout, one JSON object
per line (--format json) or as a table; the summary by rule, API and caller goes to stderr for
json and stdout for table. Exit status: 0 no findings, 2 only deprecations and hygiene, 3 an API
or feature removed at or before --target-version is in use, 1 an error.`

// Config holds the scan flags.
type Config struct {
	TargetVersion string
	Format        string
	RulesFiles    flagenv.StringList
	Cluster       string
	MaxEventSize  int
	DedupWindow   int
	Progress      string
	MaxBadReports int
}

// RegisterFlags adds the scan flags to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.TargetVersion, "target-version", "", "Kubernetes `X.Y` you plan to run: exit 3 when something removed at or before it is used (empty: any removal)")
	fs.StringVar(&c.Format, "format", "json", "output format: json (one finding per line) or table")
	fs.Var(&c.RulesFiles, "rules-file", "extra catalogue `files`, comma-separated or repeated, that add or override rules, APIs, annotations and labels")
	fs.StringVar(&c.Cluster, "cluster", "default", "cluster name put in findings")
	fs.IntVar(&c.MaxEventSize, "max-event-size", 4<<20, "largest line accepted, in bytes; longer lines are reported and skipped")
	fs.IntVar(&c.DedupWindow, "dedup-window", dedup.DefaultSize, "finding keys remembered to merge the stages of one request")
	fs.StringVar(&c.Progress, "progress", "auto", "progress bar on stderr: auto (on a terminal), always or never")
	fs.IntVar(&c.MaxBadReports, "max-bad-reports", 20, "bad lines reported one by one; the rest are counted")
}

// Validate checks the flag values.
func (c *Config) Validate() error {
	if _, err := kubeversion.Parse(c.TargetVersion); err != nil && c.TargetVersion != "" {
		return fmt.Errorf("--target-version %q: want MAJOR.MINOR, e.g. 1.25", c.TargetVersion)
	}
	if c.Format != "json" && c.Format != "table" {
		return fmt.Errorf("--format %q: want json or table", c.Format)
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
	if c.MaxEventSize < 1024 {
		return fmt.Errorf("--max-event-size %d: want at least 1024 bytes", c.MaxEventSize)
	}
	return nil
}

// Main runs `classify scan` with args (after "scan") and returns the exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("classify scan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	cfg.RegisterFlags(fs)
	flagenv.Usage(fs, synopsis)
	if err := flagenv.Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitClean
		}
		fmt.Fprintf(stderr, "classify scan: %v\n", err)
		return ExitError
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "classify scan: %v\n", err)
		return ExitError
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "classify scan: no input: give audit log files, or - for stdin (see --help)")
		return ExitError
	}
	cat, err := rules.Load(cfg.RulesFiles...)
	if err != nil {
		fmt.Fprintf(stderr, "classify scan: %v\n", err)
		return ExitError
	}
	target, _ := kubeversion.Parse(cfg.TargetVersion) // checked by Validate; unset when empty
	s := &scanner{
		cfg: cfg, target: target, engine: rules.NewEngine(cat), stdout: bufio.NewWriterSize(stdout, 64<<10), stderr: stderr,
		dec: auditevent.NewDecoder(cfg.MaxEventSize), seen: dedup.New(cfg.DedupWindow),
		metadataOnly: map[string]*int{}, badReasons: map[string]int{},
	}
	if cfg.Format == "table" {
		s.table = newTable(s.stdout)
	}
	s.enc = json.NewEncoder(&s.jsonBuf)
	s.enc.SetEscapeHTML(false)
	return s.run(fs.Args(), stdin)
}

type scanner struct {
	cfg    Config
	target kubeversion.Version // zero: any removal blocks
	engine *rules.Engine
	dec    *auditevent.Decoder
	seen   *dedup.Window
	stdout *bufio.Writer
	stderr io.Writer
	enc    *json.Encoder
	table  *tableWriter
	// jsonBuf holds one encoded finding, jsonOut the same with DEL and C1 controls escaped.
	jsonBuf bytes.Buffer
	jsonOut []byte

	matches      []rules.Match
	sum          summary
	findings     int
	blocking     int
	events       atomic.Int64
	bytesRead    atomic.Int64
	bad          int
	badReasons   map[string]int
	metadataOnly map[string]*int
	failed       bool
	pos          string
	managed      managed
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
	for _, f := range files {
		if err := s.file(f, stdin); err != nil {
			fmt.Fprintf(s.stderr, "classify scan: %s\n", printable.String(err.Error()))
			s.failed = true
		}
	}
	stopProgress()
	if s.table != nil {
		s.table.flush()
	}
	if err := s.stdout.Flush(); err != nil {
		fmt.Fprintf(s.stderr, "classify scan: write output: %v\n", err)
		return ExitError
	}
	sumOut := s.stderr
	if s.table != nil {
		sumOut = s.stdout
	}
	s.writeSummary(sumOut, len(files), time.Since(start))
	if w, ok := sumOut.(*bufio.Writer); ok {
		_ = w.Flush()
	}
	_ = s.stdout.Flush()
	switch {
	case s.failed:
		return ExitError
	case s.blocking > 0:
		return ExitRemoved
	case s.findings > 0:
		return ExitFindings
	}
	return ExitClean
}

// countingReader counts the bytes read from a file for the progress bar.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// file classifies one input: a path or "-" (stdin), plain or gzip (detected by content).
func (s *scanner) file(name string, stdin io.Reader) error {
	var r io.Reader
	if name == "-" {
		r = stdin
		name = "stdin"
	} else {
		f, err := os.Open(name)
		if err != nil {
			return err // *fs.PathError: "open NAME: why"
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.IsDir() {
			return fmt.Errorf("%s is a directory: give audit log files", printable.String(name))
		}
		r = f
	}
	br := bufio.NewReaderSize(countingReader{r, &s.bytesRead}, 256<<10)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("%s: gzip: %w", name, err)
		}
		defer zr.Close()
		br = bufio.NewReaderSize(zr, 256<<10)
	}
	if document(br) {
		return s.readDocument(name, br)
	}
	var line []byte
	for n := 1; ; n++ {
		var err error
		var tooLong bool
		line, tooLong, err = readLine(br, line[:0], s.cfg.MaxEventSize)
		if len(line) > 0 || tooLong {
			s.pos = name + ":" + strconv.Itoa(n)
			if tooLong {
				s.badLine(fmt.Errorf("%w (line over %d bytes)", auditevent.ErrTooLarge, s.cfg.MaxEventSize))
			} else {
				s.line(line)
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
	}
}

// readLine reads one line without its newline into buf. A line longer than max is
// consumed and dropped, reporting tooLong.
func readLine(br *bufio.Reader, buf []byte, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(buf)+len(chunk) > max+2 {
				tooLong, buf = true, buf[:0]
			} else {
				buf = append(buf, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if tooLong {
			return nil, true, err
		}
		for len(buf) > 0 && (buf[len(buf)-1] == '\n' || buf[len(buf)-1] == '\r') {
			buf = buf[:len(buf)-1]
		}
		return buf, false, err
	}
}

func (s *scanner) line(data []byte) {
	if len(bytes.TrimSpace(data)) == 0 {
		return // blank line
	}
	if err := s.decode(data); err != nil {
		// An EventList may have good items and bad ones: each bad one is reported.
		var multi interface{ Unwrap() []error }
		if errors.As(err, &multi) {
			for _, e := range multi.Unwrap() {
				s.badLine(e)
			}
			return
		}
		s.badLine(err)
	}
}

func (s *scanner) badLine(err error) {
	s.bad++
	reason := "other"
	for _, e := range []error{auditevent.ErrNotJSON, auditevent.ErrInvalidUTF8, auditevent.ErrTooLarge, auditevent.ErrNotAuditEvent, auditevent.ErrEmptyEventList} {
		if errors.Is(err, e) {
			reason = e.Error()
		}
	}
	s.badReasons[reason]++
	if s.bad <= s.cfg.MaxBadReports {
		fmt.Fprintf(s.stderr, "classify scan: %s: skipped: %s\n", printable.String(s.pos), printable.String(err.Error()))
	}
}

func (s *scanner) event(ev *auditevent.Event) error {
	s.events.Add(1)
	if ev.RequestObjectRaw == nil && rules.NeedsBody(ev) && (ev.Level == "Metadata" || ev.Level == "None" || ev.Level == "") {
		// Look up, never assign, with the event's string: an assignment would store it as the
		// key, and it lives only until the next line.
		if n := s.metadataOnly[ev.ObjectRef.Resource]; n != nil {
			*n++
		} else {
			s.metadataOnly[strings.Clone(ev.ObjectRef.Resource)] = new(1)
		}
	}
	s.matches = s.engine.Classify(ev, s.matches[:0])
	for i := range s.matches {
		m := &s.matches[i]
		if !s.seen.FirstTime(dedup.Key(s.cfg.Cluster, ev.AuditID, m.Rule.ID)) {
			continue
		}
		f := s.engine.Finding(ev, m, s.cfg.Cluster, "")
		s.emit(f)
	}
	return nil
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

func (s *scanner) emit(f *auditlensv1.Finding) {
	s.findings++
	blocking := Blocks(f.RemovedIn, s.target)
	if blocking {
		s.blocking++
	}
	s.sum.add(f, blocking)
	if s.table != nil {
		s.table.row(f)
		return
	}
	s.jsonBuf.Reset()
	_ = s.enc.Encode(ToJSON(f))
	s.jsonOut = printable.JSON(s.jsonOut[:0], s.jsonBuf.Bytes())
	_, _ = s.stdout.Write(s.jsonOut)
}

func (s *scanner) writeSummary(w io.Writer, files int, took time.Duration) {
	events := s.events.Load()
	fmt.Fprintf(w, "\nclassify scan: %d event%s in %d input%s, %d finding%s", events, plural(int(events)), files, plural(files), s.findings, plural(s.findings))
	if !s.target.IsZero() {
		fmt.Fprintf(w, ", %d blocking an upgrade to %s", s.blocking, s.target)
	} else {
		fmt.Fprintf(w, ", %d on something already removed in some release", s.blocking)
	}
	fmt.Fprintf(w, ", %d bad line%s skipped (%s)\n", s.bad, plural(s.bad), took.Round(time.Millisecond))
	if s.bad > 0 {
		reasons := slices.Sorted(maps.Keys(s.badReasons))
		for _, r := range reasons {
			fmt.Fprintf(w, "  bad lines, %s: %d\n", r, s.badReasons[r])
		}
		if s.bad > s.cfg.MaxBadReports {
			fmt.Fprintf(w, "  (only the first %d were reported one by one)\n", s.cfg.MaxBadReports)
		}
	}
	s.writeSkipped(w)
	s.sum.write(w, s.target)
	if len(s.metadataOnly) > 0 {
		res := slices.Sorted(maps.Keys(s.metadataOnly))
		n := 0
		parts := make([]string, 0, len(res))
		for _, r := range res {
			n += *s.metadataOnly[r]
			parts = append(parts, fmt.Sprintf("%s %d", printable.String(r), *s.metadataOnly[r]))
		}
		were := "were"
		if n == 1 {
			were = "was"
		}
		fmt.Fprintf(w, "\nnote: %d write%s %s logged at Metadata level only (%s), so the rules that read request bodies\n"+
			"(seccomp and AppArmor annotations, CSR key usages, node labels and selectors, Service topologyKeys)\n"+
			"could not check them. Log these resources at Request level: see deploy/audit-policy.yaml.\n",
			n, plural(n), were, strings.Join(parts, ", "))
	}
}
