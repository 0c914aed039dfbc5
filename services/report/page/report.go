package page

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"

	"github.com/auditlens/auditlens/lib/printable"
	"github.com/auditlens/auditlens/services/report/weekly"
	"github.com/auditlens/auditlens/services/report/weekly/render"
)

var contentTypes = map[string]string{
	"html": "text/html; charset=utf-8",
	"text": "text/plain; charset=utf-8",
	"json": "application/json",
	"csv":  "text/csv; charset=utf-8",
}

// weeksOffered is how many full weeks before this one the report's week list offers.
const weeksOffered = 12

// A report cut down to one team reads every caller (up to callersForTeam) and lists
// defaultCallers per blocker, as the whole report does.
const (
	callersForTeam = 10000
	defaultCallers = 25
)

// TeamFilter cuts a weekly report down to one team's callers (owners.Owners).
type TeamFilter interface {
	TeamNames() []string
	Filter(r *weekly.Report, team string, perBlocker int) *weekly.Report
}

// report is GET /report: the weekly report of one cluster, week and target, in a format;
// as HTML with the console's controls.
func (h *Handler) report(w http.ResponseWriter, r *http.Request) error {
	f, err := readForm(r.URL.RawQuery, append(scopeParams, "format", "team")...)
	if err != nil {
		return err
	}
	format := f.v.Get("format")
	if format == "" {
		format = "html"
	}
	ct, ok := contentTypes[format]
	if !ok {
		return bad("format", "%q: want html, text, json or csv", format)
	}
	s, err := h.scope(r.Context(), f, format == "html")
	if err != nil {
		return err
	}
	team, err := f.text("team", 63)
	if err != nil {
		return err
	}
	var teams TeamFilter
	if h.Owners != nil {
		teams = h.Owners()
	}
	if team != "" && (teams == nil || !slices.Contains(teams.TeamNames(), team)) {
		return bad("team", "%q: no such team in the owners file", team)
	}
	o := weekly.Options{Cluster: s.Cluster, Target: s.Target, WeekEnding: s.Week, Table: h.Table, Now: h.now}
	if team != "" {
		o.CallersPerBlocker = callersForTeam
	}
	// The page's choice of targets (the removal releases the cluster's findings name) is read
	// beside the report.
	var rep *weekly.Report
	var releases []weekly.Version
	reads := []func() error{func() (err error) {
		if rep, err = weekly.Build(r.Context(), h.DB, o); err != nil {
			return fmt.Errorf("build weekly report: %w", err)
		}
		return nil
	}}
	if format == "html" {
		reads = append(reads, func() (err error) { releases, err = h.reader().Releases(r.Context(), s.Cluster); return err })
	}
	if err := together(reads...); err != nil {
		return err
	}
	if h.Accept != nil {
		rep.Accept(h.Accept(s.Cluster), h.now())
	}
	if team != "" {
		rep = teams.Filter(rep, team, defaultCallers)
	}
	var buf bytes.Buffer
	if format != "html" {
		if err := render.Write(&buf, format, rep, render.Images{}); err != nil {
			return fmt.Errorf("render weekly report: %w", err)
		}
		write(w, ct, &buf)
		return nil
	}
	img, err := render.DataImages(rep)
	if err != nil {
		h.log().Error("draw charts", "err", err)
	}
	ctl := h.controls(s, rep, releases)
	if teams != nil {
		ctl.Teams = []render.Option{{Value: "", Label: "all callers", Selected: team == ""}}
		for _, n := range teams.TeamNames() {
			ctl.Teams = append(ctl.Teams, render.Option{Value: n, Label: n, Selected: n == team})
		}
		if team != "" {
			for i, f := range ctl.Formats {
				ctl.Formats[i].URL = s.link("/report", "format", f.Label, "team", team)
			}
		}
	}
	if err := render.Page(&buf, rep, img, ctl); err != nil {
		return fmt.Errorf("render weekly report: %w", err)
	}
	write(w, ct, &buf)
	return nil
}

// controls are the report page's links and form for scope s.
func (h *Handler) controls(s scope, rep *weekly.Report, releases []weekly.Version) *render.Controls {
	c := &render.Controls{Home: link("/", "target-version", s.Target.String()), Action: "/report", WeekNote: s.Note,
		Search: s.link("/search")}
	names := []string{s.Cluster}
	for _, cl := range s.Clusters {
		names = append(names, cl.Name)
	}
	slices.Sort(names)
	for _, n := range slices.Compact(names) {
		c.Clusters = append(c.Clusters, render.Option{Value: n, Label: printable.Truncate(n, 80), Selected: n == s.Cluster})
	}
	lastFull := weekly.LastWeekEnding(h.now())
	weeks := []weekly.Date{s.Week}
	for i := -1; i < weeksOffered; i++ {
		weeks = append(weeks, weekly.Date{Time: lastFull.AddDate(0, 0, -7*i)})
	}
	slices.SortFunc(weeks, func(a, b weekly.Date) int { return b.Compare(a.Time) })
	for _, d := range slices.Compact(weeks) {
		label := fmt.Sprintf("%s to %s", d.AddDate(0, 0, -6).Format(weekly.DateLayout), d)
		switch {
		case d.After(lastFull.Time) && !d.After(lastFull.AddDate(0, 0, 7)):
			label += " (this week so far)"
		case d == lastFull:
			label += " (last full week)"
		}
		c.Weeks = append(c.Weeks, render.Option{Value: d.String(), Label: label, Selected: d == s.Week})
	}
	for _, v := range h.targets(s.Target, releases...) {
		c.Targets = append(c.Targets, render.Option{Value: v.String(), Label: v.String(), Selected: v == s.Target})
	}
	for _, format := range render.Formats {
		c.Formats = append(c.Formats, render.Link{Label: format, URL: s.link("/report", "format", format)})
	}
	for _, b := range rep.Blockers {
		c.Callers = append(c.Callers, s.link("/callers", "rule", b.RuleID, "group", b.APIGroup, "version", b.APIVersion, "resource", b.Resource))
	}
	return c
}
