package page

import (
	"context"
	"fmt"
	"html/template"
	"slices"
	"strconv"
	"time"

	"github.com/auditlens/auditlens/services/report/access"
	"github.com/auditlens/auditlens/services/report/console"
	"github.com/auditlens/auditlens/services/report/weekly"
)

// scope is what every page after the index looks at: one cluster, one week, one target.
// A week is the seven UTC days ending with its last day (a Sunday when the console chooses it).
type scope struct {
	Cluster string
	// Week is the week's last day.
	Week   weekly.Date
	Target weekly.Version
	// Note says which week this is and why it was chosen.
	Note string
	// Clusters are the clusters seen, when they were read to choose the week.
	Clusters []console.ClusterSummary
	// Until and Days, when Until is set, replace the week by the Days days ending with
	// Until (the first screen's lookback window).
	Until weekly.Date
	Days  int
}

// scopeParams are the parameters of scope.
var scopeParams = []string{"cluster", "week-ending", "target-version", "until", "days"}

// window is the scope's week, [Week-6 days, Week+1 day), or its Days days to Until.
func (s scope) window() console.Window {
	if !s.Until.IsZero() {
		end := s.Until.AddDate(0, 0, 1)
		return console.Window{From: end.AddDate(0, 0, -s.Days), To: end}
	}
	end := s.Week.AddDate(0, 0, 1)
	return console.Window{From: end.AddDate(0, 0, -7), To: end}
}

// query is the scope as name, value pairs for link.
func (s scope) query(kv ...string) []string {
	q := []string{"cluster", s.Cluster, "week-ending", s.Week.String(), "target-version", s.Target.String()}
	if !s.Until.IsZero() {
		q = append(q, "until", s.Until.String(), "days", strconv.Itoa(s.Days))
	}
	return append(q, kv...)
}

// link is a console URL in this scope.
func (s scope) link(path string, kv ...string) template.URL { return link(path, s.query(kv...)...) }

// scope reads cluster, week-ending and target-version from f. Without a week or a cluster,
// or when readClusters is set, it reads the clusters seen; without a week it chooses the
// cluster's defaultWeek.
func (h *Handler) scope(ctx context.Context, f form, readClusters bool) (scope, error) {
	var s scope
	var err error
	if s.Cluster, err = f.text("cluster", maxShort); err != nil {
		return s, err
	}
	now := h.now()
	lastFull := weekly.LastWeekEnding(now)
	thisWeek := weekly.Date{Time: lastFull.AddDate(0, 0, 7)}
	if v := f.v.Get("week-ending"); v != "" {
		d, err := weekly.ParseDate(v)
		if err != nil {
			return s, bad("week-ending", "%q: want YYYY-MM-DD", v)
		}
		if err := weekly.CheckWeekEnding(d); err != nil {
			return s, bad("week-ending", "%s: %v", v, err)
		}
		// A week ends on a Sunday: another day means the week it falls in.
		s.Week = weekEnding(d.Time)
	}
	if v := f.v.Get("until"); v != "" {
		d, err := weekly.ParseDate(v)
		if err != nil {
			return s, bad("until", "%q: want YYYY-MM-DD", v)
		}
		if err := weekly.CheckWeekEnding(d); err != nil {
			return s, bad("until", "%s: %v", v, err)
		}
		s.Until = d
		if s.Days, err = f.number("days", h.lookbackDays(), 1, 400); err != nil {
			return s, err
		}
		if s.Week.IsZero() {
			s.Week = weekEnding(d.Time)
		}
	} else if f.v.Has("days") {
		return s, bad("days", "goes with until")
	}
	if s.Target, err = h.target(f); err != nil {
		return s, err
	}
	if s.Week.IsZero() || readClusters || s.Cluster == "" {
		if s.Clusters, err = h.reader().Clusters(ctx, thisWeek.AddDate(0, 0, -6), s.Target); err != nil {
			return s, err
		}
		if s.Clusters, err = allowed(ctx, s.Clusters); err != nil {
			return s, err
		}
	}
	if s.Cluster == "" {
		s.Cluster = h.Cluster
		if !s.seen(s.Cluster) && len(s.Clusters) > 0 {
			s.Cluster = s.Clusters[0].Name
		}
		if s.Cluster == "" {
			return s, bad("cluster", "required (no findings yet name one)")
		}
	}
	if err := h.checkCluster(ctx, s.Cluster, s.seen(s.Cluster)); err != nil {
		return s, err
	}
	chosen := !s.Week.IsZero()
	var summary console.ClusterSummary
	for _, c := range s.Clusters {
		if c.Name == s.Cluster {
			summary = c
		}
	}
	if !chosen {
		s.Week = defaultWeek(summary, lastFull, thisWeek)
	}
	s.Note = weekNote(s.Week, lastFull, thisWeek, chosen, summary)
	if !s.Until.IsZero() {
		s.Note = fmt.Sprintf("Showing the %d days to %s.", s.Days, s.Until)
	}
	return s, nil
}

// weekNote says which week a page shows and, when the console chose it, why.
func weekNote(week, lastFull, thisWeek weekly.Date, chosen bool, c console.ClusterSummary) string {
	switch {
	case week == thisWeek && chosen:
		return "Showing this week so far."
	case week == thisWeek:
		return "Showing this week so far: the last full week has no findings."
	case week == lastFull:
		return "Showing the last full week."
	case chosen:
		return fmt.Sprintf("Showing the week ending %s.", week)
	case !c.NewestBlocker.IsZero():
		return fmt.Sprintf("Showing the week of the newest use of a blocker (ending %s): this week and the last have no findings.", week)
	}
	return fmt.Sprintf("Showing the week of the newest event (ending %s): this week and the last have no findings.", week)
}

func (s scope) seen(cluster string) bool {
	for _, c := range s.Clusters {
		if c.Name == cluster {
			return true
		}
	}
	return false
}

// target reads target-version, defaultTarget when absent. A target must be a release the
// catalogue knows: a minor from its oldest to its newest removal release (or the service's
// configured target).
func (h *Handler) target(f form) (weekly.Version, error) {
	v := f.v.Get("target-version")
	if v == "" {
		t := h.defaultTarget()
		if t.IsZero() {
			return t, bad("target-version", "required (the service has no default)")
		}
		return t, nil
	}
	t, err := weekly.ParseVersion(v)
	if err != nil {
		return t, bad("target-version", "%q: %v", v, err)
	}
	if lo, hi, ok := h.releaseRange(); ok && t != h.DefaultTarget && (t.Key() < lo.Key() || t.Key() > hi.Key()) {
		return t, bad("target-version", "%s: want a release the rule catalogue knows, %s to %s", v, lo, hi)
	}
	return t, nil
}

// releaseRange is the oldest and newest of Releases (ok false when there are none).
func (h *Handler) releaseRange() (lo, hi weekly.Version, ok bool) {
	if len(h.Releases) == 0 {
		return lo, hi, false
	}
	cmp := func(a, b weekly.Version) int { return a.Key() - b.Key() }
	return slices.MinFunc(h.Releases, cmp), slices.MaxFunc(h.Releases, cmp), true
}

// clusterTarget is the default target of a cluster running version (zero: unknown): the
// next minor, when the catalogue knows it, else the catalogue's newest release; why says
// which.
func (h *Handler) clusterTarget(version weekly.Version) (t weekly.Version, why string) {
	def := h.defaultTarget()
	if version.IsZero() {
		return def, "the catalogue's newest release"
	}
	next := version.Next()
	if lo, hi, ok := h.releaseRange(); ok && next.Key() > hi.Key() {
		return def, fmt.Sprintf("the catalogue's newest release (the cluster runs %s)", version)
	} else if ok && next.Key() < lo.Key() {
		return lo, fmt.Sprintf("the catalogue's oldest release (the cluster runs %s)", version)
	}
	return next, fmt.Sprintf("the release after %s, the cluster's", version)
}

// lookbackDays is Limits.Lookback in whole days.
func (h *Handler) lookbackDays() int {
	d := h.Limits.Lookback
	if d <= 0 {
		d = DefaultLimits().Lookback
	}
	return max(1, int(d/(24*time.Hour)))
}

// checkCluster fails with 403 when the request's user may not read cluster, and with 404
// (listing the clusters the user may read) when no finding names it; seen says the clusters
// already read name it.
func (h *Handler) checkCluster(ctx context.Context, cluster string, seen bool) error {
	if err := allow(ctx, cluster); err != nil {
		return err
	}
	if seen {
		return nil
	}
	ok, err := h.reader().Known(ctx, cluster)
	if err != nil || ok {
		return err
	}
	names, err := h.reader().Names(ctx)
	if err != nil {
		return err
	}
	nf := notFoundError{cluster: cluster}
	for _, n := range names {
		if ok, err := access.Allowed(ctx, n); err == nil && ok {
			nf.known = append(nf.known, n)
		}
	}
	return nf
}
