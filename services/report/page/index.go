package page

import (
	"html/template"
	"net/http"
	"time"

	"github.com/auditlens/auditlens/services/report/console"
	"github.com/auditlens/auditlens/services/report/weekly"
	"github.com/auditlens/auditlens/services/report/weekly/render"
)

// clusterRow is one cluster of the index.
type clusterRow struct {
	console.ClusterSummary
	// Week is the week the report page chooses (defaultWeek); Report links to its report,
	// Formats to it in each format.
	Week    weekly.Date
	Report  template.URL
	Formats []render.Link
	// BlockerWeek links to the report of the week of the newest use of a blocker.
	BlockerWeek template.URL
}

// index is GET /: the clusters seen, with this week's and the last full week's findings,
// blockers for the target and the newest event, each linking to its report.
func (h *Handler) index(w http.ResponseWriter, r *http.Request) error {
	f, err := readForm(r.URL.RawQuery, "target-version")
	if err != nil {
		return err
	}
	target, err := h.target(f)
	if err != nil {
		return err
	}
	lastFull := weekly.LastWeekEnding(h.now())
	thisWeek := weekly.Date{Time: lastFull.AddDate(0, 0, 7)}
	weekStart := thisWeek.AddDate(0, 0, -6)
	clusters, err := h.reader().Clusters(r.Context(), weekStart, target)
	if err != nil {
		return err
	}
	if clusters, err = allowed(r.Context(), clusters); err != nil {
		return err
	}
	body := struct {
		Target    weekly.Version
		Targets   []render.Option
		WeekStart string
		Clusters  []clusterRow
	}{Target: target, WeekStart: weekStart.Format(weekly.DateLayout)}
	for _, v := range h.targets(target) {
		body.Targets = append(body.Targets, render.Option{Value: v.String(), Label: v.String(), Selected: v == target})
	}
	for _, c := range clusters {
		// The report links name no week: the report page chooses the same one and says why.
		q := []string{"cluster", c.Name, "target-version", target.String()}
		row := clusterRow{ClusterSummary: c, Week: defaultWeek(c, lastFull, thisWeek), Report: link("/report", q...)}
		if !c.NewestBlocker.IsZero() {
			row.BlockerWeek = link("/report", append(q, "week-ending", weekEnding(c.NewestBlocker).String())...)
		}
		for _, format := range render.Formats {
			row.Formats = append(row.Formats, render.Link{Label: format, URL: link("/report", append(q, "format", format)...)})
		}
		body.Clusters = append(body.Clusters, row)
	}
	return show(w, "index", view{Title: "auditlens: upgrade blockers by cluster", Body: body})
}

// defaultWeek is the week a cluster's report shows when none is asked for: the last full
// week, else this week so far when the last full week has no findings; when neither has,
// the week of the newest event that blocks the target, else of the newest event.
func defaultWeek(c console.ClusterSummary, lastFull, thisWeek weekly.Date) weekly.Date {
	switch {
	case c.LastWeek > 0:
		return lastFull
	case c.ThisWeek > 0:
		return thisWeek
	case !c.NewestBlocker.IsZero():
		return weekEnding(c.NewestBlocker)
	case c.Newest.Unix() > 0:
		return weekEnding(c.Newest)
	}
	return lastFull
}

// weekEnding is the Sunday that ends the week of t.
func weekEnding(t time.Time) weekly.Date {
	return weekly.Date{Time: weekly.LastWeekEnding(t).AddDate(0, 0, 7)}
}
