// Package schedule sends the weekly report on a cron schedule inside the long-running report
// service, once per (cluster, week_ending, target_version), however often it restarts.
package schedule

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"
	_ "time/tzdata" // time zones in minimal images

	"github.com/robfig/cron/v3"

	"github.com/auditlens/auditlens/services/report/weekly"
	"github.com/auditlens/auditlens/services/report/weekly/mail"
)

// Sender delivers one report (mail.Sender does).
type Sender interface {
	// Send mails r to the sender's own recipients.
	Send(ctx context.Context, r *weekly.Report) error
	// SendTo mails r to the addresses to (a split delivery).
	SendTo(ctx context.Context, r *weekly.Report, to []string) error
}

// Addressed is one mail of a split delivery: a report and its recipients.
type Addressed struct {
	Name       string
	Recipients []string
	Report     *weekly.Report
}

// Outcome says what Deliver did.
type Outcome string

// Outcomes of Deliver.
const (
	Sent        Outcome = "sent"
	AlreadySent Outcome = "already-sent"
	// Interrupted: an earlier attempt recorded "sending" but never finished (the process died
	// while talking to the SMTP server). It may or may not have arrived, so it is not sent
	// again unless forced.
	Interrupted Outcome = "interrupted"
)

// Delivery builds and sends one week's report, at most once per (cluster, week, target).
type Delivery struct {
	DB         *sql.DB
	Ledger     weekly.Ledger
	Sender     Sender
	Recipients []string
	// Options of the report; WeekEnding is set by Deliver.
	Options weekly.Options
	Log     *slog.Logger
	Now     func() time.Time
	// Amend, when set, changes the built report before it is mailed (accepted risks, notices).
	Amend func(ctx context.Context, r *weekly.Report) error
	// Split, when set, mails the reports it returns (one per team, the platform team's whole)
	// instead of the report to Recipients.
	Split func(r *weekly.Report) []Addressed
	// OnSent, when set, is told of each mail sent: the team ("" for the whole report) and its
	// recipients (Recipients for the whole report).
	OnSent func(team string, recipients []string)
}

// Deliver sends the report of the week ending week unless the ledger shows it was sent (or
// an attempt was interrupted); force sends anyway.
func (d *Delivery) Deliver(ctx context.Context, week weekly.Date, force bool) (Outcome, error) {
	now := time.Now
	if d.Now != nil {
		now = d.Now
	}
	o := d.Options
	o.WeekEnding = week
	if o.Target.IsZero() {
		// One default for every command: the release after the cluster's at the week's end.
		t, why, err := weekly.TargetFor(ctx, d.DB, o.Table, o.Cluster, week.AddDate(0, 0, 1))
		if err != nil {
			return "", err
		}
		if t.IsZero() {
			return "", fmt.Errorf("%w: no --target-version, and the release of cluster %q is unknown (no control-plane user agent seen, no heartbeat of a classify naming its catalogue)",
				weekly.ErrInvalid, o.Cluster)
		}
		o.Target = t
		if d.Log != nil {
			d.Log.Info("weekly report judged against the default target", "cluster", o.Cluster, "target_version", t.String(), "why", why)
		}
	}
	if err := o.Validate(); err != nil {
		return "", err
	}
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("cluster", o.Cluster, "week_ending", week.String(), "target_version", o.Target.String())
	e, err := d.Ledger.Latest(ctx, o.Cluster, week, o.Target)
	if err != nil {
		return "", err
	}
	if !force {
		switch e.Status {
		case weekly.StatusSent:
			log.Info("weekly report already sent", "sent_at", e.At)
			return AlreadySent, nil
		case weekly.StatusSending:
			log.Warn("an earlier attempt to send this weekly report was interrupted; not sending again (force to resend)", "started_at", e.At)
			return Interrupted, nil
		}
	}
	r, err := weekly.Build(ctx, d.DB, o)
	if err != nil {
		return "", err
	}
	if d.Amend != nil {
		if err := d.Amend(ctx, r); err != nil {
			return "", err
		}
	}
	mails := []Addressed{{Report: r}} // no Recipients: the sender's own
	recipients := d.Recipients
	if d.Split != nil {
		mails, recipients = d.Split(r), nil
		for _, m := range mails {
			recipients = append(recipients, m.Recipients...)
		}
	}
	if err := d.Ledger.Record(ctx, o.Cluster, week, o.Target, recipients, weekly.StatusSending, now()); err != nil {
		return "", err
	}
	var err2 error
	for _, m := range mails {
		if m.Recipients == nil {
			err2 = d.Sender.Send(ctx, m.Report)
		} else if err2 = d.Sender.SendTo(ctx, m.Report, m.Recipients); err2 != nil {
			err2 = fmt.Errorf("mail %s: %w", strings.Join(m.Recipients, ","), err2)
		}
		if err2 != nil {
			break
		}
		if m.Name != "" {
			log.Info("weekly report sent to a team", "team", m.Name, "blockers", len(m.Report.Blockers), "recipients", len(m.Recipients))
		}
		if d.OnSent != nil {
			to := m.Recipients
			if to == nil {
				to = d.Recipients
			}
			d.OnSent(m.Name, to)
		}
	}
	if err := err2; err != nil {
		// Recorded on a fresh context: ctx may be what was cancelled.
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if rerr := d.Ledger.Record(rctx, o.Cluster, week, o.Target, recipients, weekly.StatusFailed, now()); rerr != nil {
			return "", errors.Join(err, rerr)
		}
		return "", err
	}
	if err := d.Ledger.Record(ctx, o.Cluster, week, o.Target, recipients, weekly.StatusSent, now()); err != nil {
		return Sent, err
	}
	log.Info("weekly report sent", "blockers", len(r.Blockers), "mails", len(mails), "recipients", len(recipients))
	return Sent, nil
}

// DefaultCron is Monday 08:00.
const DefaultCron = "0 8 * * 1"

// Config of the schedule inside the report service.
type Config struct {
	// Cron is a cron expression (5 fields, or 6 with seconds first, or a descriptor such as
	// @weekly), read in TimeZone. Empty or "off" disables the schedule.
	Cron     string
	TimeZone string
	Target   weekly.Version
	// Retry is the wait before trying a failed week again (until the next activation).
	Retry time.Duration
	Mail  mail.Config
}

// DefaultConfig sends on Monday 08:00 UTC against DefaultTarget, retrying a failed week after
// 10 minutes, once recipients are given.
func DefaultConfig() Config {
	return Config{Cron: DefaultCron, TimeZone: "UTC", Retry: 10 * time.Minute,
		Mail: mail.DefaultConfig()}
}

// RegisterFlags adds the schedule's flags and the mail flags to fs, each defaulting to the
// current value of its field.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Cron, "weekly-schedule", c.Cron, "cron expression of the weekly report e-mail, in --weekly-time-zone (off: no e-mail; it runs only when --mail-to is set)")
	fs.StringVar(&c.TimeZone, "weekly-time-zone", c.TimeZone, "IANA time zone of --weekly-schedule and of the week's days, e.g. Europe/Berlin")
	fs.Var(&c.Target, "target-version", "Kubernetes `version` X.Y the weekly report judges blockers against "+
		"(default: the release after the cluster's, read from the store each week; else the newest release classify's catalogue knows)")
	fs.DurationVar(&c.Retry, "weekly-retry", c.Retry, "wait before retrying a weekly report that failed to send")
	c.Mail.RegisterFlags(fs)
}

// DefaultTarget is the console's target for a cluster whose release is unknown when neither
// --target-version nor a rule catalogue (the all-in-one's) names one.
var DefaultTarget = weekly.Version{Major: 1, Minor: 35}

// Enabled reports whether the schedule should run: a schedule and recipients are set.
func (c *Config) Enabled() bool { return c.Cron != "" && c.Cron != "off" && len(c.Mail.To) > 0 }

var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Validate checks c (nothing when the schedule is not enabled); it changes nothing.
func (c Config) Validate() error {
	if !c.Enabled() {
		return nil
	}
	if _, err := parser.Parse(c.Cron); err != nil {
		return fmt.Errorf("--weekly-schedule %q: %w", c.Cron, err)
	}
	if _, err := time.LoadLocation(c.TimeZone); err != nil {
		return fmt.Errorf("--weekly-time-zone %q: %w", c.TimeZone, err)
	}
	if c.Retry <= 0 {
		return fmt.Errorf("--weekly-retry %v: want more than 0", c.Retry)
	}
	return c.Mail.Validate()
}

// Scheduler is the daemon.Component that sends the weekly report on its schedule.
type Scheduler struct {
	d     *Delivery
	sched cron.Schedule
	loc   *time.Location
	retry time.Duration
	log   *slog.Logger
	now   func() time.Time
}

// New makes the Scheduler of cluster's report: db reads findings and the ledger, ins writes
// the ledger (a *store.Store fits both roles through its DB() and Insert).
func New(c Config, db *sql.DB, ins weekly.Inserter, cluster string, log *slog.Logger) (*Scheduler, error) {
	if !c.Enabled() {
		return nil, errors.New("weekly schedule: no --weekly-schedule or no --mail-to")
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	sched, _ := parser.Parse(c.Cron)
	loc, _ := time.LoadLocation(c.TimeZone)
	snd, err := mail.New(c.Mail)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "weekly-schedule")
	return &Scheduler{
		d: &Delivery{DB: db, Ledger: weekly.Ledger{DB: db, Ins: ins}, Sender: snd, Recipients: c.Mail.To,
			Options: weekly.Options{Cluster: cluster, Target: c.Target}, Log: log},
		sched: sched, loc: loc, retry: c.Retry, log: log, now: time.Now,
	}, nil
}

// Ready implements daemon.Component; sending problems are logged and retried, not fatal.
func (s *Scheduler) Ready() error { return nil }

// Delivery is how the scheduler delivers a week: set its Amend and Split before Run.
func (s *Scheduler) Delivery() *Delivery { return s.d }

// Run sends the report at every activation of the schedule until ctx is cancelled. At start it
// catches up: when the activation for the latest full week already passed (the service was
// down at the time), that week is sent now unless the ledger shows it went out.
func (s *Scheduler) Run(ctx context.Context) error {
	var pending *weekly.Date
	var retryAt time.Time
	if w, due := s.catchUp(s.now()); due {
		pending, retryAt = &w, s.now()
	}
	for {
		now := s.now().In(s.loc)
		fire := s.sched.Next(now)
		wake := fire
		if pending != nil && retryAt.Before(fire) {
			wake = retryAt
		}
		t := time.NewTimer(wake.Sub(s.now()))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		week := weekly.LastWeekEnding(fire)
		if s.now().Before(fire) && pending != nil {
			week = *pending
		}
		out, err := s.d.Deliver(ctx, week, false)
		if ctx.Err() != nil {
			return nil //nolint:nilerr // stopped mid-delivery: the week stays pending for the next start
		}
		if err != nil {
			s.log.Error("weekly report not sent; will retry", "week_ending", week.String(), "retry_in", s.retry, "err", err)
			pending, retryAt = &week, s.now().Add(s.retry)
			continue
		}
		s.log.Debug("weekly report", "week_ending", week.String(), "outcome", out)
		pending = nil
	}
}

// catchUp returns the latest full week whose activation is at or before now.
func (s *Scheduler) catchUp(now time.Time) (weekly.Date, bool) {
	local := now.In(s.loc)
	week := weekly.LastWeekEnding(local)
	y, m, d := week.AddDate(0, 0, 1).Date()
	weekEnd := time.Date(y, m, d, 0, 0, 0, 0, s.loc)
	first := s.sched.Next(weekEnd.Add(-time.Nanosecond))
	return week, !first.After(local)
}
