package readiness

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/auditlens/auditlens/lib/flagenv"
	"github.com/auditlens/auditlens/lib/printable"
	"github.com/auditlens/auditlens/services/report/weekly"
)

// Exit codes of `report readiness`.
const (
	ExitReady   = 0
	ExitError   = 1
	ExitUsage   = 2
	ExitBlocked = 3
	ExitUnknown = 4
)

// CommandSynopsis is the head of `report readiness --help`.
const CommandSynopsis = `report readiness --cluster NAME [--target-version X.Y] [flags]

Judges whether cluster NAME is ready for the upgrade to X.Y (default: the release after the
cluster's, from --current-version or the control plane's user agents in the store): blocked
when something removed at or before X.Y was used in the window (--readiness-window) and is not accepted in
--acknowledgements-file; unknown when nothing blocks but the cluster sent no events for longer
than --readiness-max-silence within the window (counted from its first event ever, when that
is inside the window: a cluster installed an hour ago is judged on that hour); else ready. A
cluster with no event ever stored is an error naming the clusters that have some. Writes the
judgement (text or json) and exits 0 ready, 3 blocked, 4 unknown, 1 error, 2 bad usage.`

// Store is an open auditlens database.
type Store interface {
	DB() *sql.DB
	Close() error
}

// Engine is how the command reaches the store (the report binary's engine flags).
type Engine struct {
	RegisterFlags func(fs *flag.FlagSet)
	Validate      func() error
	Open          func(ctx context.Context) (Store, error)
	// Embedded says whether Open opens the embedded store, which a running auditlens holds
	// locked: then --readiness-console is asked when Open fails.
	Embedded func() bool
	// Now is the end of the window; nil means time.Now (tests pass their clock).
	Now func() time.Time
}

// CommandConfig holds the flags of `report readiness`.
type CommandConfig struct {
	Cluster    string
	Target     weekly.Version
	Current    weekly.Version
	Window     time.Duration
	MaxSilence time.Duration
	Format     string
	Timeout    time.Duration
	Console    string
}

// DefaultConsole is --readiness-console's default: the all-in-one's console.
const DefaultConsole = "http://127.0.0.1:9101"

// Main runs `report readiness` with args and returns its exit code. register adds more flags
// (the acknowledgements file) and accept loads what they name for a cluster (nil: no
// acknowledgements).
func Main(args []string, stdout, stderr io.Writer, eng Engine, register func(*flag.FlagSet), accept func(cluster string) (weekly.Acceptor, error)) int {
	fs := flag.NewFlagSet("report readiness", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := CommandConfig{Window: DefaultWindow, MaxSilence: DefaultMaxSilence, Format: "text", Timeout: 2 * time.Minute, Console: DefaultConsole}
	fs.StringVar(&c.Cluster, "cluster", c.Cluster, "the `cluster` to judge")
	fs.Var(&c.Target, "target-version", "Kubernetes `version` X.Y of the upgrade (default: the release after the cluster's, --current-version or read from the store)")
	fs.Var(&c.Current, "current-version", "Kubernetes `version` X.Y the cluster runs: blockers removed at or before it are named as failing now "+
		"(default: the release its control plane's user agents named last, else its newest kubelet's or controller manager's among the findings)")
	fs.DurationVar(&c.Window, "readiness-window", c.Window, "how far back to look for blockers")
	fs.DurationVar(&c.MaxSilence, "readiness-max-silence", c.MaxSilence, "the longest stretch of the window without findings before the gate is unknown")
	fs.StringVar(&c.Format, "format", c.Format, "output format: text or json")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "give up after this long")
	fs.StringVar(&c.Console, "readiness-console", c.Console, "`URL` of the console of a running auditlens to ask (its "+APIPath+", with its own window and silence) when the embedded store is held by it; empty: never")
	if register != nil {
		register(fs)
	}
	if eng.RegisterFlags != nil {
		eng.RegisterFlags(fs)
	}
	flagenv.Usage(fs, CommandSynopsis)
	if err := flagenv.Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "report readiness: %v\n", err)
		return ExitUsage
	}
	usage := func(err error) int {
		fmt.Fprintf(stderr, "report readiness: %v\n", err)
		return ExitUsage
	}
	switch {
	case fs.NArg() > 0:
		return usage(fmt.Errorf("unexpected argument %q (see --help)", fs.Arg(0)))
	case c.Cluster == "":
		return usage(errors.New("--cluster is required"))
	case !c.Current.IsZero() && !c.Target.IsZero() && !c.Current.Less(c.Target):
		return usage(fmt.Errorf("--target-version %s is not after --current-version %s: an upgrade goes to a later release", c.Target, c.Current))
	case c.Format != "text" && c.Format != "json":
		return usage(fmt.Errorf("--format %q: want text or json", c.Format))
	}
	if err := (Config{Window: c.Window, MaxSilence: c.MaxSilence}).Validate(); err != nil {
		return usage(err)
	}
	if eng.Validate != nil {
		if err := eng.Validate(); err != nil {
			return usage(err)
		}
	}
	var acc weekly.Acceptor
	if accept != nil {
		a, err := accept(c.Cluster)
		if err != nil {
			fmt.Fprintf(stderr, "report readiness: %v\n", err)
			return ExitError
		}
		acc = a
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	if c.Target.IsZero() && !c.Current.IsZero() {
		c.Target = c.Current.Next()
	}
	st, err := eng.Open(ctx)
	if err != nil && c.Console != "" && eng.Embedded != nil && eng.Embedded() {
		if c.Target.IsZero() {
			return usage(fmt.Errorf("--target-version is required: the embedded store is held by a running auditlens (%w), and the cluster's release cannot be read", err))
		}
		// A running auditlens holds the embedded store: its judgement, from its console.
		r, aerr := Ask(ctx, c.Console, c.Cluster, c.Target)
		if aerr != nil {
			fmt.Fprintf(stderr, "report readiness: %v; and the running auditlens's console at %s did not answer: %v\n", err, c.Console, aerr)
			return ExitError
		}
		fmt.Fprintf(stderr, "report readiness: the embedded store is held by a running auditlens: its judgement, from %s%s\n", c.Console, APIPath)
		if err := Write(stdout, c.Format, r); err != nil {
			fmt.Fprintf(stderr, "report readiness: %v\n", err)
			return ExitError
		}
		return ExitCode(r)
	}
	if err != nil {
		fmt.Fprintf(stderr, "report readiness: %v\n", err)
		return ExitError
	}
	defer st.Close()
	if c.Target.IsZero() {
		// One default for every command: the release after the cluster's (weekly.TargetFor).
		now := time.Now
		if eng.Now != nil {
			now = eng.Now
		}
		t, why, err := weekly.TargetFor(ctx, st.DB(), "", c.Cluster, now())
		if err != nil {
			fmt.Fprintf(stderr, "report readiness: %v\n", err)
			return ExitError
		}
		if t.IsZero() {
			return usage(fmt.Errorf("--target-version is required: the release of cluster %q is unknown (no control-plane user agent seen; --current-version gives it)", c.Cluster))
		}
		c.Target = t
		fmt.Fprintf(stderr, "report readiness: target %s, %s\n", c.Target, why)
	}
	o := Options{Cluster: c.Cluster, Target: c.Target, Window: c.Window, MaxSilence: c.MaxSilence, Acceptor: acc, Now: eng.Now}
	if !c.Current.IsZero() {
		o.Current, o.CurrentWhy = c.Current, "--current-version"
	}
	r, err := Evaluate(ctx, st.DB(), o)
	if err != nil {
		fmt.Fprintf(stderr, "report readiness: %v\n", err)
		return ExitError
	}
	if r.Stream.FirstEvent.IsZero() && len(r.Blockers) == 0 {
		// A name the store has never seen is a mistake to name, not a stream to wait for.
		known, err := KnownClusters(ctx, st.DB(), time.Time{})
		if err != nil {
			fmt.Fprintf(stderr, "report readiness: %v\n", err)
			return ExitError
		}
		list := "none yet"
		if len(known) > 0 {
			list = strings.Join(known, ", ")
		}
		fmt.Fprintf(stderr, "report readiness: no event from cluster %q has ever been stored; the clusters with events: %s\n", c.Cluster, list)
		return ExitError
	}
	if err := Write(stdout, c.Format, r); err != nil {
		fmt.Fprintf(stderr, "report readiness: %v\n", err)
		return ExitError
	}
	return ExitCode(r)
}

// ExitCode is the command's exit code for r.
func ExitCode(r *Result) int {
	switch r.State {
	case Ready:
		return ExitReady
	case Blocked:
		return ExitBlocked
	default:
		return ExitUnknown
	}
}

// Write writes r as json or text.
func Write(w io.Writer, format string, r *Result) error {
	if format == "json" {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(r)
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("%s: %s for %s (%s)\n", r.Cluster, r.State, r.Target, r.Message)
	if r.Current.IsZero() {
		p("cluster's release: unknown (no control-plane user agent seen; --current-version gives it)\n")
	} else {
		p("cluster's release: %s (%s)\n", r.Current, printable.String(r.CurrentWhy))
	}
	p("window: %s to %s; audit stream alive: %t (longest silence %s)\n", r.WindowStart.Format(time.RFC3339),
		r.WindowEnd.Format(time.RFC3339), r.Stream.Alive, time.Duration(r.Stream.LongestSilence))
	p("coverage: %s\n", printable.String(r.Coverage.String()))
	if r.Unchecked != "" {
		p("not checked: %s\n", r.Unchecked)
	}
	for _, h := range r.Hops {
		needs := "nothing"
		if len(h.Blockers) > 0 {
			needs = printable.String(strings.Join(h.Blockers, ", "))
		}
		p("hop to %s: %s\n", h.Release, needs)
	}
	for _, b := range r.Blockers {
		kind := "blocker"
		if b.FailingNow {
			kind = "failing now"
		} else if len(r.Hops) > 0 {
			kind = "blocker of " + b.RemovedIn
		}
		p("%s: %s (%s, removed in %s): %s, %s, last used %s\n", kind, name(b.Key), b.RuleID, b.RemovedIn,
			count(int(b.Findings), "finding"), count(b.CallerCount, "caller"), b.LastSeen.Format(time.RFC3339))
		if b.Expired != nil {
			p("  accepted until %s by %s: EXPIRED, blocks again (%s)\n", b.Expired.Until, b.Expired.By, b.Expired.Source)
		}
		for _, cl := range b.Callers {
			p("  caller: %q user agent %q namespace %q: %d, last %s\n", cl.Username, cl.UserAgent, cl.Namespace, cl.Count,
				cl.LastSeen.Format(time.RFC3339))
		}
	}
	for _, m := range r.Migrated {
		p("migrated: %q user agent %q moved off %s (%s, removed in %s) at %s, after %s, its last call of it at %s\n", m.Username, m.UserAgent,
			name(m.Key), m.RuleID, m.RemovedIn, m.MigratedAt.Format(time.RFC3339), count(int(m.Findings), "finding"), m.LastSeen.Format(time.RFC3339))
	}
	if more := r.MigratedCount - len(r.Migrated); more > 0 {
		p("migrated: %d more\n", more)
	}
	for _, a := range r.Accepted {
		until := "no expiry"
		if !a.Acceptance.Until.IsZero() {
			until = "until " + a.Acceptance.Until.String()
		}
		p("accepted %s: %s (%s, removed in %s) by %s: %s (%s)\n", until, name(a.Key), a.RuleID, a.RemovedIn,
			a.Acceptance.By, a.Acceptance.Reason, a.Acceptance.Source)
	}
	return nil
}

// Ask gets the judgement of cluster and target from the readiness API of the console at base
// (a running auditlens): its window and silence bound, not this command's.
func Ask(ctx context.Context, base, cluster string, target weekly.Version) (*Result, error) {
	u, err := url.Parse(strings.TrimRight(base, "/") + APIPath)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--readiness-console %q: want an http(s) URL", base)
	}
	q := url.Values{"cluster": {cluster}}
	if !target.IsZero() {
		q.Set("target_version", target.String())
	}
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", u.Redacted(), resp.Status, strings.TrimSpace(printable.String(string(body[:min(len(body), 300)]))))
	}
	var r Result
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%s: not a readiness result: %w", u.Redacted(), err)
	}
	return &r, nil
}

// count is "1 caller", "2 callers".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
