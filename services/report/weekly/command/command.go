// Package command is the `report weekly` command: flags, building the report of one week,
// writing it in a format and, with --send, mailing it once per week.
package command

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/auditlens/auditlens/lib/flagenv"
	"github.com/auditlens/auditlens/services/report/weekly"
	"github.com/auditlens/auditlens/services/report/weekly/mail"
	"github.com/auditlens/auditlens/services/report/weekly/render"
	"github.com/auditlens/auditlens/services/report/weekly/schedule"
)

// Store is an open auditlens database: queries through DB, inserts through Insert.
type Store interface {
	DB() *sql.DB
	weekly.Inserter
	Close() error
}

// Engine is how the command reaches the store; the report binary passes its engine flags
// (--clickhouse-dsn, --clickhouse-data-dir, ...) so the command opens what the service writes.
type Engine struct {
	// RegisterFlags adds the engine's flags.
	RegisterFlags func(fs *flag.FlagSet)
	// Validate checks them; nil means no check.
	Validate func() error
	// Open opens the store chosen by the flags.
	Open func(ctx context.Context) (Store, error)
	// Prepare, when set, sets up the delivery (accepted risks, owners) after the flags are
	// parsed: its Amend applies to the report written too.
	Prepare func(ctx context.Context, d *schedule.Delivery) error
	// Now is the clock that picks the default week and stamps the report; nil means time.Now
	// (tests pass theirs).
	Now func() time.Time
}

// Synopsis is the head of --help.
const Synopsis = `report weekly [flags]

Builds the weekly upgrade report of one cluster: what blocks the upgrade to --target-version
(findings whose API or feature is removed at or before it), who still calls it, what is new
or resolved since the week before, totals and trend. Writes it as html, text, json or csv;
with --send, mails it (HTML with inline charts, plain-text part, CSV attachment) once per
(cluster, week, target version): a rerun does not mail a sent week again unless --force.`

// Config holds the flags of the command.
type Config struct {
	Target weekly.Version
	// Current is the release the cluster runs (zero: read from the store).
	Current    weekly.Version
	WeekEnding string
	Format     string
	Out        string
	Send       bool
	Force      bool
	Cluster    string
	// CallersPerBlocker caps the callers listed under each blocker.
	CallersPerBlocker int
	Timeout           time.Duration
	Mail              mail.Config
}

// DefaultConfig is the command's configuration when no flag changes it.
func DefaultConfig() Config {
	return Config{Format: "text", Cluster: "default", CallersPerBlocker: 25,
		Timeout: 5 * time.Minute, Mail: mail.DefaultConfig()}
}

// RegisterFlags adds the command's flags to fs, each defaulting to the current value of its
// field.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Var(&c.Target, "target-version", "Kubernetes `version` X.Y to judge blockers against "+
		"(default: the release after the cluster's, --current-version or read from the store; else the newest release classify's catalogue knows)")
	fs.Var(&c.Current, "current-version", "Kubernetes `version` X.Y the cluster runs: blockers removed at or before it are listed apart as failing now "+
		"(default: the release its control plane's user agents named last, else its newest kubelet's or controller manager's among the findings)")
	fs.StringVar(&c.WeekEnding, "week-ending", c.WeekEnding, "last `day` (YYYY-MM-DD, UTC) of the week to report (default: the Sunday of the last full week)")
	fs.StringVar(&c.Format, "format", c.Format, "output format: html, text, json or csv")
	fs.StringVar(&c.Out, "out", c.Out, "write the report to `file` (default: standard output; with --send and no --out: nothing)")
	fs.BoolVar(&c.Send, "send", c.Send, "mail the report to --mail-to (once per cluster, week and target version)")
	fs.BoolVar(&c.Force, "force", c.Force, "with --send, mail the week again even if it was sent")
	fs.StringVar(&c.Cluster, "cluster", c.Cluster, "cluster whose findings are reported")
	fs.IntVar(&c.CallersPerBlocker, "callers-per-blocker", c.CallersPerBlocker, "callers listed under each blocker, the busiest first")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "give up after this long")
	c.Mail.RegisterFlags(fs)
}

// Validate checks the flags and returns the week to report.
func (c *Config) Validate(now time.Time) (weekly.Date, error) {
	if !c.Current.IsZero() && !c.Target.IsZero() && !c.Current.Less(c.Target) {
		return weekly.Date{}, fmt.Errorf("--target-version %s is not after --current-version %s: an upgrade goes to a later release", c.Target, c.Current)
	}
	week := weekly.LastWeekEnding(now.UTC())
	if c.WeekEnding != "" {
		d, err := weekly.ParseDate(c.WeekEnding)
		if err != nil {
			return weekly.Date{}, fmt.Errorf("--week-ending %q: want YYYY-MM-DD", c.WeekEnding)
		}
		if d.After(now) {
			return weekly.Date{}, fmt.Errorf("--week-ending %s is in the future", c.WeekEnding)
		}
		if err := weekly.CheckWeekEnding(d); err != nil {
			return weekly.Date{}, fmt.Errorf("--week-ending %s: %w", c.WeekEnding, err)
		}
		week = d
	}
	ok := false
	for _, f := range render.Formats {
		ok = ok || f == c.Format
	}
	if !ok {
		return weekly.Date{}, fmt.Errorf("--format %q: want one of %s", c.Format, strings.Join(render.Formats, ", "))
	}
	if c.Cluster == "" {
		return weekly.Date{}, errors.New("--cluster is empty")
	}
	if c.CallersPerBlocker < 1 {
		return weekly.Date{}, fmt.Errorf("--callers-per-blocker %d: want at least 1", c.CallersPerBlocker)
	}
	if c.Force && !c.Send {
		return weekly.Date{}, errors.New("--force only makes sense with --send")
	}
	if c.Send {
		if err := c.Mail.Validate(); err != nil {
			return weekly.Date{}, err
		}
	}
	return week, nil
}

// Main runs `report weekly` with args and returns the exit code: 0 done, 1 failed, 2 bad usage.
func Main(args []string, stdout, stderr io.Writer, eng Engine) int {
	fs := flag.NewFlagSet("report weekly", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := DefaultConfig()
	c.RegisterFlags(fs)
	if eng.RegisterFlags != nil {
		eng.RegisterFlags(fs)
	}
	flagenv.Usage(fs, Synopsis)
	if err := flagenv.Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "report weekly: %v\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "report weekly: unexpected argument %q (see --help)\n", fs.Arg(0))
		return 2
	}
	if eng.Now == nil {
		eng.Now = time.Now
	}
	week, err := c.Validate(eng.Now())
	if err == nil && eng.Validate != nil {
		err = eng.Validate()
	}
	if err != nil {
		fmt.Fprintf(stderr, "report weekly: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	if err := run(ctx, c, week, stdout, stderr, eng); err != nil {
		fmt.Fprintf(stderr, "report weekly: %v\n", err)
		return 1
	}
	return 0
}

func run(ctx context.Context, c Config, week weekly.Date, stdout, stderr io.Writer, eng Engine) error {
	st, err := eng.Open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	if c.Target.IsZero() && !c.Current.IsZero() {
		c.Target = c.Current.Next()
	}
	if c.Target.IsZero() {
		t, why, err := weekly.TargetFor(ctx, st.DB(), "", c.Cluster, week.AddDate(0, 0, 1))
		if err != nil {
			return err
		}
		if t.IsZero() {
			return fmt.Errorf("--target-version is required: the release of cluster %q is unknown (no control-plane user agent seen; --current-version gives it)", c.Cluster)
		}
		c.Target = t
		fmt.Fprintf(stderr, "report weekly: target %s, %s\n", t, why)
	}
	opts := weekly.Options{Cluster: c.Cluster, Target: c.Target, WeekEnding: week, CallersPerBlocker: c.CallersPerBlocker, Now: eng.Now}
	if !c.Current.IsZero() {
		opts.Current, opts.CurrentWhy = c.Current, "--current-version"
	}
	d := &schedule.Delivery{DB: st.DB(), Ledger: weekly.Ledger{DB: st.DB(), Ins: st}, Recipients: c.Mail.To, Options: opts}
	if eng.Prepare != nil {
		if err := eng.Prepare(ctx, d); err != nil {
			return err
		}
	}
	if c.Out != "" || !c.Send {
		r, err := weekly.Build(ctx, st.DB(), opts)
		if err != nil {
			return err
		}
		if d.Amend != nil {
			if err := d.Amend(ctx, r); err != nil {
				return err
			}
		}
		if err := write(c, r, stdout); err != nil {
			return err
		}
	}
	if !c.Send {
		return nil
	}
	snd, err := mail.New(c.Mail)
	if err != nil {
		return err
	}
	d.Sender = snd
	var sent []string // every mail: the whole report's, and each team's with --owners-file
	d.OnSent = func(team string, to []string) {
		if team == "" {
			sent = append(sent, strings.Join(to, ", "))
		} else {
			sent = append(sent, fmt.Sprintf("team %s (%s)", team, strings.Join(to, ", ")))
		}
	}
	out, err := d.Deliver(ctx, week, c.Force)
	if err != nil {
		return err
	}
	switch out {
	case schedule.Sent:
		fmt.Fprintf(stderr, "report weekly: sent the week ending %s to %s\n", week, strings.Join(sent, "; "))
	case schedule.AlreadySent:
		fmt.Fprintf(stderr, "report weekly: the week ending %s was already sent (--force sends it again)\n", week)
	case schedule.Interrupted:
		return fmt.Errorf("an earlier attempt to send the week ending %s was interrupted; check the mailbox and use --force to send it again", week)
	}
	return nil
}

// write renders r to --out (atomically) or to stdout.
func write(c Config, r *weekly.Report, stdout io.Writer) error {
	var buf bytes.Buffer
	img := render.Images{}
	if c.Format == "html" {
		var err error
		if img, err = render.DataImages(r); err != nil {
			return err
		}
	}
	if err := render.Write(&buf, c.Format, r, img); err != nil {
		return err
	}
	if c.Out == "" {
		_, err := stdout.Write(buf.Bytes())
		return err
	}
	tmp := c.Out + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if err := os.Rename(tmp, c.Out); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	return nil
}
