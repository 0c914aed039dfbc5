// Package render writes a weekly report as HTML, plain text, JSON or CSV.
package render

import (
	"bytes"
	_ "embed"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/auditlens/auditlens/lib/printable"
	"github.com/auditlens/auditlens/services/report/weekly"
)

// Formats are the names Write accepts.
var Formats = []string{"html", "text", "json", "csv"}

// Images are the sources of the charts in the HTML report: "cid:..." URLs in an e-mail,
// data: URLs in a standalone file, empty to leave a chart out.
type Images struct {
	Daily  template.URL
	Weekly template.URL
}

// Write renders r in format (one of Formats) to w; HTML gets img as its chart sources.
func Write(w io.Writer, format string, r *weekly.Report, img Images) error {
	switch format {
	case "html":
		return HTML(w, r, img)
	case "text":
		return Text(w, r)
	case "json":
		return JSON(w, r)
	case "csv":
		return CSV(w, r)
	}
	return fmt.Errorf("format %q: want one of %s", format, strings.Join(Formats, ", "))
}

// Subject is the one-line title of the report (the e-mail subject).
func Subject(r *weekly.Report) string {
	breaks, failing := weekly.PartsOf(r.Blockers)
	s := fmt.Sprintf("auditlens weekly: %s, week ending %s: %d upgrade blocker%s for %s",
		clean(r.Cluster), r.WeekEnding, len(breaks), plural(len(breaks)), r.Target)
	if len(failing) > 0 {
		s += fmt.Sprintf(", %d failing now", len(failing))
	}
	return s
}

// releaseLine says which release the cluster runs and where that was read, or that it is
// unknown.
func releaseLine(r *weekly.Report) string {
	if r.Current.IsZero() {
		return "The cluster's release is unknown (no control-plane user agent seen): every blocker is listed as breaking on the upgrade."
	}
	return fmt.Sprintf("The cluster runs %s (%s).", r.Current, clean(r.CurrentWhy))
}

// coverageLine says what the week's events were and what could not be checked ("" when no
// heartbeat said).
func coverageLine(r *weekly.Report) string {
	if r.Coverage == "" {
		return ""
	}
	s := "The report rests on " + clean(r.Coverage) + "."
	if r.NotChecked != "" {
		s += " Not checked: " + clean(r.NotChecked) + "."
	}
	return s
}

// firstFailing is the index of the first blocker failing already (len(bs) when none).
func firstFailing(bs []weekly.Blocker) int {
	breaks, _ := weekly.PartsOf(bs)
	return len(breaks)
}

//go:embed report.html.tmpl
var htmlSrc string

var htmlTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"ts":           func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"day":          func(t time.Time) string { return t.UTC().Format("Mon 2006-01-02") },
	"delta":        delta,
	"dash":         orDash,
	"plural":       plural,
	"minus":        func(a, b int) int { return a - b },
	"release":      releaseLine,
	"coverage":     coverageLine,
	"firstFailing": firstFailing,
}).Parse(htmlSrc))

// HTML writes r as one HTML document; everything taken from audit events is escaped by
// html/template for the context it lands in.
func HTML(w io.Writer, r *weekly.Report, img Images) error { return Page(w, r, img, nil) }

// Controls are the report page's links and form in the web console (the e-mail and the
// standalone file have none). Every URL is built by the caller from a fixed path and
// encoded query values.
type Controls struct {
	// Home is the console's index.
	Home template.URL
	// Action is the path the form is submitted to (GET).
	Action string
	// Clusters, Weeks (by week ending) and Targets are the form's choices; Teams too when
	// there is an owners file (the first, value "", for all callers).
	Clusters, Weeks, Targets, Teams []Option
	// WeekNote says which week is shown and why.
	WeekNote string
	// Formats link to this report in each format.
	Formats []Link
	// Callers links to the callers of each of the report's Blockers, in their order.
	Callers []template.URL
	// Search is the console's search page for this cluster and week.
	Search template.URL
}

// Option is one choice of a form's list.
type Option struct {
	Value, Label string
	Selected     bool
}

// Link is a labelled URL.
type Link struct {
	Label string
	URL   template.URL
}

// Page writes r as the HTML document HTML writes, with the console's controls when ctl is
// not nil.
func Page(w io.Writer, r *weekly.Report, img Images, ctl *Controls) error {
	var buf bytes.Buffer
	if err := htmlTmpl.Execute(&buf, struct {
		R       *weekly.Report
		Img     Images
		Subject string
		Ctl     *Controls
	}{escaped(r), img, Subject(r), ctl}); err != nil {
		return fmt.Errorf("render html: %w", err)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// escaped is a copy of r whose strings from audit events have their control characters
// escaped (see clean): harmless in HTML, but unreadable and invalid there.
func escaped(r *weekly.Report) *weekly.Report {
	c := *r
	key := func(k weekly.Key) weekly.Key {
		return weekly.Key{RuleID: clean(k.RuleID), APIGroup: clean(k.APIGroup), APIVersion: clean(k.APIVersion),
			Resource: clean(k.Resource), RemovedIn: clean(k.RemovedIn)}
	}
	c.Cluster = clean(r.Cluster)
	c.Blockers = make([]weekly.Blocker, len(r.Blockers))
	for i, b := range r.Blockers {
		b.Key, b.Replacement, b.Message = key(b.Key), clean(b.Replacement), clean(b.Message)
		callers := make([]weekly.Caller, len(b.Callers))
		for j, cl := range b.Callers {
			cl.Username, cl.UserAgent, cl.Namespace = clean(cl.Username), clean(cl.UserAgent), clean(cl.Namespace)
			callers[j] = cl
		}
		b.Callers = callers
		c.Blockers[i] = b
	}
	c.Accepted = make([]weekly.Accepted, len(r.Accepted))
	for i, a := range r.Accepted {
		a.Key, a.Replacement, a.Message, a.Callers = key(a.Key), clean(a.Replacement), clean(a.Message), nil
		c.Accepted[i] = a
	}
	changes := func(in []weekly.Change) []weekly.Change {
		out := make([]weekly.Change, len(in))
		for i, ch := range in {
			ch.Key, ch.Username, ch.UserAgent, ch.Namespace = key(ch.Key), clean(ch.Username), clean(ch.UserAgent), clean(ch.Namespace)
			out[i] = ch
		}
		return out
	}
	c.New, c.Resolved = changes(r.New), changes(r.Resolved)
	c.Migrated = make([]weekly.Migration, len(r.Migrated))
	for i, m := range r.Migrated {
		m.Key, m.Username, m.UserAgent = key(m.Key), clean(m.Username), clean(m.UserAgent)
		c.Migrated[i] = m
	}
	c.Totals.ByRule = make([]weekly.RuleCount, len(r.Totals.ByRule))
	for i, rc := range r.Totals.ByRule {
		rc.RuleID = clean(rc.RuleID)
		c.Totals.ByRule[i] = rc
	}
	return &c
}

// JSON writes r as one indented JSON document.
func JSON(w io.Writer, r *weekly.Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// CSVHeader is the first line of the CSV: one row per blocker caller of the week.
var CSVHeader = []string{"cluster", "week_ending", "target_version", "rule_id", "api_group", "api_version",
	"resource", "removed_in", "replacement", "username", "user_agent", "namespace", "count",
	"first_seen", "last_seen", "new", "failing_now"}

// CSV writes one row per blocker caller. A cell that a spreadsheet would take for a formula
// (starting with = + - @ or a control character) is prefixed with a single quote.
func CSV(w io.Writer, r *weekly.Report) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	for _, b := range r.Blockers {
		for _, c := range b.Callers {
			row := []string{r.Cluster, r.WeekEnding.String(), r.Target.String(), b.RuleID, b.APIGroup, b.APIVersion,
				b.Resource, b.RemovedIn, b.Replacement, c.Username, c.UserAgent, c.Namespace,
				strconv.FormatUint(c.Count, 10), c.FirstSeen.UTC().Format(time.RFC3339), c.LastSeen.UTC().Format(time.RFC3339),
				strconv.FormatBool(c.New), strconv.FormatBool(b.FailingNow)}
			for i := range row {
				row[i] = defuse(row[i])
			}
			if err := cw.Write(row); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

func defuse(s string) string {
	if s == "" {
		return s
	}
	switch s[0] {
	case '=', '+', '-', '@', '\t', '\r', '\n':
		return "'" + s
	}
	return s
}

// Text writes r as plain text. Control characters from audit events are written escaped
// (\x1b, \n), so the text cannot drive a terminal or forge lines.
func Text(w io.Writer, r *weekly.Report) error {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("%s\n\n", Subject(r))
	p("Cluster %s, target version %s, week %s to %s (UTC).\n", clean(r.Cluster), r.Target,
		r.WeekStart.Format("2006-01-02"), r.WeekEnding)
	p("%s\n", releaseLine(r))
	if c := coverageLine(r); c != "" {
		p("%s\n", c)
	}
	t := r.Totals
	p("Findings: %d (%s since the week before). Blocking the upgrade: %d (%s).\n", t.Findings,
		delta(t.Findings, t.PreviousFindings), t.Blocking, delta(t.Blocking, t.PreviousBlocking))
	p("Blockers: %d with %d caller%s; new callers: %d; resolved callers: %d.\n",
		len(r.Blockers), t.BlockerCallers, plural(t.BlockerCallers), r.NewCount, r.ResolvedCount)
	breaks, failing := weekly.PartsOf(r.Blockers)
	if r.Current.IsZero() {
		p("\nBLOCKERS for %s\n", r.Target)
	} else {
		p("\nBREAKS ON THE UPGRADE TO %s (removed after %s): %d\n", r.Target, r.Current, len(breaks))
	}
	if len(breaks) == 0 {
		p("  none: nothing seen this week is removed after %s and at or before %s.\n", orDash(r.Current.String()), r.Target)
	}
	for i, bl := range r.Blockers {
		if i == len(breaks) {
			p("\nFAILING NOW (removed at or before %s, the release the cluster runs: these callers fail today, a removed API with 404): %d\n", r.Current, len(failing))
		}
		p("\n%d. %s %s, removed in %s", i+1, clean(bl.RuleID), clean(bl.API()), clean(bl.RemovedIn))
		if bl.Replacement != "" {
			p(", use %s", clean(bl.Replacement))
		}
		p(": %d finding%s", bl.Findings, plural(int(bl.Findings)))
		if bl.New {
			p(" [new]")
		}
		p("\n")
		if bl.Message != "" {
			p("   %s\n", clean(bl.Message))
		}
		if e := bl.Expired; e != nil {
			p("   ACCEPTED UNTIL %s by %s (%s): EXPIRED, blocks again\n", e.Until, clean(e.By), clean(e.Source))
		}
		for _, c := range bl.Callers {
			p("   - %s, agent %s, namespace %s: %d, first %s, last %s", orDash(clean(c.Username)),
				orDash(clean(c.UserAgent)), orDash(clean(c.Namespace)), c.Count,
				c.FirstSeen.Format(time.RFC3339), c.LastSeen.Format(time.RFC3339))
			if c.New {
				p(" [new]")
			}
			p("\n")
		}
		if more := bl.CallerCount - len(bl.Callers); more > 0 {
			p("   ... and %d more caller%s\n", more, plural(more))
		}
	}
	if len(r.Accepted) > 0 {
		p("\nACCEPTED RISKS (not blocking)\n")
		for _, a := range r.Accepted {
			until := "without expiry"
			if !a.Acceptance.Until.IsZero() {
				until = "until " + a.Acceptance.Until.String()
			}
			p("  - %s %s, removed in %s: %d finding%s, %d caller%s; accepted %s by %s: %s (%s)\n", clean(a.RuleID), clean(a.API()),
				clean(a.RemovedIn), a.Findings, plural(int(a.Findings)), a.CallerCount, plural(a.CallerCount), until,
				clean(a.Acceptance.By), clean(a.Acceptance.Reason), clean(a.Acceptance.Source))
		}
	}
	if len(r.Notices) > 0 {
		p("\nACKNOWLEDGEMENTS TO REVIEW\n")
		for _, n := range r.Notices {
			p("  - %s: %s\n", clean(n.Source), clean(n.Message))
		}
	}
	changes := func(title string, cs []weekly.Change, total int) {
		p("\n%s: %d\n", title, total)
		for _, c := range cs {
			p("  - %s %s: %s, agent %s, namespace %s (%d)\n", clean(c.RuleID), clean(c.API()),
				orDash(clean(c.Username)), orDash(clean(c.UserAgent)), orDash(clean(c.Namespace)), c.Count)
		}
	}
	changes("NEW since the week before", r.New, r.NewCount)
	changes("RESOLVED since the week before", r.Resolved, r.ResolvedCount)
	if r.MigratedCount > 0 {
		p("\nMIGRATED this week (called the replacement after their last call of the removed API: fixed, not blocking): %d\n", r.MigratedCount)
		for _, m := range r.Migrated {
			p("  - %s %s: %s, agent %s: %d finding%s, the last %s; replacement called %s\n", clean(m.RuleID), clean(m.API()),
				orDash(clean(m.Username)), orDash(clean(m.UserAgent)), m.Findings, plural(int(m.Findings)),
				m.LastSeen.Format(time.RFC3339), m.MigratedAt.Format(time.RFC3339))
		}
	}
	p("\nBY RULE (this week / week before / blocking)\n")
	for _, rc := range t.ByRule {
		p("  %-32s %8d %8d %8d\n", clean(rc.RuleID), rc.Findings, rc.Previous, rc.Blocking)
	}
	p("\nDAILY (findings / blocking)\n")
	for _, d := range r.Daily {
		p("  %s %8d %8d\n", d.Start.Format("Mon 2006-01-02"), d.Findings, d.Blocking)
	}
	p("\nWEEKLY (week starting, findings / blocking)\n")
	for _, d := range r.Weekly {
		p("  %s %8d %8d\n", d.Start.Format("2006-01-02"), d.Findings, d.Blocking)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// clean escapes the control characters of text from audit events (see lib/printable).
func clean(s string) string { return printable.String(s) }

func delta(now, before uint64) string {
	switch {
	case now > before:
		return fmt.Sprintf("+%d", now-before)
	case now < before:
		return fmt.Sprintf("-%d", before-now)
	}
	return "±0"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
