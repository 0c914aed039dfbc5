package page

import (
	"context"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

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
	// From and Until are the lookback window's first and last day; Live says it ends today
	// (else at the cluster's newest finding: an imported log).
	From, Until weekly.Date
	Live        bool
	// Target is the cluster's target and TargetWhy why it is that one.
	Target    weekly.Version
	TargetWhy string
	// Current is the release the cluster runs (zero: unknown), CurrentWhy where it was read.
	Current    weekly.Version
	CurrentWhy string
	// Blockers are what the upgrade breaks (New of them), then what fails already (Failing).
	Blockers     []blockerRow
	New, Failing int
	// Hops says which releases of an upgrade that skips releases remove nothing in use.
	Hops string
	// Earlier is set when the window holds no blocker but an older use of one exists:
	// Blockers are then those of the Days days to that use (EarlierUntil).
	Earlier      bool
	EarlierFrom  weekly.Date
	EarlierUntil weekly.Date
	// Silent is set when a live cluster's newest finding is older than a day.
	Silent bool
	// Coverage says what the window's events were (inputs, levels, bodies) and Unchecked what
	// the verdict could not check ("" when nothing).
	Coverage, Unchecked string
	// Newer names the node components newer than the cluster's release (the version-skew
	// policy allows none): "kubelet 1.38 (2)"; "" when none or the release is unknown.
	Newer string
	// Migrated names the callers that moved to the replacement of a blocker in the window
	// (they no longer block), the newest first; MigratedCount counts them all.
	Migrated      []console.Move
	MigratedCount int
	// Fleet is the window's version spread of kubelets, kube-proxies and kubectl, as
	// "kubelet 1.33 (1), 1.37 (12) · kube-proxy 1.34 (3)"; "" when none was seen.
	Fleet string
}

// blockerRow is one blocker of a cluster on the index, with links to its callers.
type blockerRow struct {
	console.Blocker
	// FailingNow: removed at or before the cluster's release. PartHead titles the first row
	// of each part (what the upgrade breaks, what fails already) when the release is known.
	FailingNow bool
	PartHead   string
	Callers    template.URL
	Top        []callerLink
}

type callerLink struct {
	console.Caller
	Requests template.URL
}

// index is GET /: per cluster, what blocks its target in the lookback window with the
// busiest callers of each blocker, linking to the callers page; and this week's and last
// week's findings.
func (h *Handler) index(w http.ResponseWriter, r *http.Request) error {
	f, err := readForm(r.URL.RawQuery, "target-version")
	if err != nil {
		return err
	}
	var chosen weekly.Version
	if f.v.Get("target-version") != "" {
		if chosen, err = h.target(f); err != nil {
			return err
		}
	}
	def := h.defaultTarget()
	if def.IsZero() && chosen.IsZero() {
		return bad("target-version", "required (the service has no default)")
	}
	listTarget := chosen
	if listTarget.IsZero() {
		listTarget = def
	}
	now := h.now()
	lastFull := weekly.LastWeekEnding(now)
	thisWeek := weekly.Date{Time: lastFull.AddDate(0, 0, 7)}
	weekStart := thisWeek.AddDate(0, 0, -6)
	clusters, err := h.reader().Clusters(r.Context(), weekStart, listTarget)
	if err != nil {
		return err
	}
	if clusters, err = allowed(r.Context(), clusters); err != nil {
		return err
	}
	days := h.lookbackDays()
	body := struct {
		Target    weekly.Version
		Chosen    bool
		Targets   []render.Option
		WeekStart string
		Days      int
		Clusters  []clusterRow
	}{Target: listTarget, Chosen: !chosen.IsZero(), WeekStart: weekStart.Format(weekly.DateLayout), Days: days}
	body.Targets = append(body.Targets, render.Option{Value: "", Label: "each cluster's next release", Selected: chosen.IsZero()})
	for _, v := range h.targets(listTarget) {
		body.Targets = append(body.Targets, render.Option{Value: v.String(), Label: v.String(), Selected: v == chosen})
	}
	// Each cluster's rows are read apart from the others', two clusters at once: a page of
	// many clusters takes the time of their queries shared between two connections.
	body.Clusters = make([]clusterRow, len(clusters))
	errs := make([]error, len(clusters))
	slots := make(chan struct{}, indexParallel)
	var wg sync.WaitGroup
	for i, c := range clusters {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			body.Clusters[i], errs[i] = h.clusterRow(r.Context(), c, chosen, listTarget, now, lastFull, thisWeek, days)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return show(w, "index", view{Title: "auditlens: upgrade blockers by cluster", Body: body})
}

// hopNotes titles the first blocker of each hop of an upgrade from current to target that
// skips releases (bs: what it breaks, ordered by release), and says which hops need nothing.
func hopNotes(bs []blockerRow, current, target weekly.Version) string {
	counts := map[int]int{}
	first := map[int]int{}
	for i, b := range bs {
		v, err := weekly.ParseVersion(b.RemovedIn)
		if err != nil {
			continue
		}
		if counts[v.Key()] == 0 {
			first[v.Key()] = i
		}
		counts[v.Key()]++
	}
	var nothing []string
	for v := current.Next(); !target.Less(v); v = v.Next() {
		n := counts[v.Key()]
		if n == 0 {
			nothing = append(nothing, v.String())
			continue
		}
		head := fmt.Sprintf("%s removes %d", v, n)
		if i := first[v.Key()]; bs[i].PartHead != "" {
			bs[i].PartHead += ". " + head
		} else {
			bs[i].PartHead = head
		}
	}
	if len(nothing) == 0 {
		return ""
	}
	verb := "removes"
	if len(nothing) > 1 {
		verb = "remove"
	}
	return "On the way to " + target.String() + ", " + strings.Join(nothing, ", ") + " " + verb + " nothing in use."
}

// indexParallel is how many clusters the first screen reads at once.
const indexParallel = 2

// clusterRow reads what the first screen shows of cluster c (listed against listTarget).
func (h *Handler) clusterRow(ctx context.Context, c console.ClusterSummary, chosen, listTarget weekly.Version, now time.Time, lastFull, thisWeek weekly.Date, days int) (clusterRow, error) {
	row := clusterRow{ClusterSummary: c, Week: defaultWeek(c, lastFull, thisWeek)}
	// The window ends today for a live cluster (an event within it), at its newest
	// finding (else event) for an imported log.
	row.Until, row.Live = weekly.DateOf(now), true
	if c.NewestEvent.Unix() > 0 && c.NewestEvent.Before(now.Add(-time.Duration(days)*24*time.Hour)) {
		end := c.Newest
		if end.Unix() <= 0 {
			end = c.NewestEvent
		}
		row.Until, row.Live = weekly.DateOf(end), false
	}
	row.Silent = row.Live && c.NewestEvent.Unix() > 0 && c.NewestEvent.Before(now.Add(-24*time.Hour))
	row.From = weekly.Date{Time: row.Until.AddDate(0, 0, 1-days)}
	win := console.Window{From: row.From.Time, To: row.Until.AddDate(0, 0, 1)}
	row.Target, row.TargetWhy = chosen, "chosen above"
	// The reads run side by side where one needs nothing of another: the release the
	// cluster runs, its fleet and its coverage; what blocks the target and who moved off it
	// (one read of the window's day rows, the longest), and, for a target of the cluster's
	// own, its newest use. With no target chosen, the release sets the target: the blockers'
	// read plan is read beside the release, and the fleet and the coverage after it, beside
	// the blockers, so that what the blockers wait for does not share the cores with them.
	var fleet []console.FleetRelease
	var cov console.Coverage
	var bs []console.Blocker
	release := func() (err error) {
		row.Current, row.CurrentWhy, err = h.reader().ClusterRelease(ctx, c.Name, win.To)
		return err
	}
	reads := []func() error{
		func() (err error) {
			bs, row.Migrated, row.MigratedCount, err = h.reader().BlockersAndMoves(ctx, c.Name, win, row.Target, console.TopCallers)
			return err
		},
		func() (err error) { fleet, err = h.reader().Fleet(ctx, c.Name, win); return err },
		func() (err error) { cov, err = h.reader().Coverage(ctx, c.Name, win); return err },
	}
	if chosen.IsZero() {
		after := reads
		reads = []func() error{func() error {
			return h.reader().PrepareBlockers(ctx, c.Name, win)
		}, func() error {
			if err := release(); err != nil {
				return err
			}
			row.Target, row.TargetWhy = h.clusterTarget(row.Current)
			if row.Target != listTarget {
				// The list judged every cluster against one target: the newest use of what
				// blocks this one is the cluster's own.
				after = append(after, func() (err error) {
					c.NewestBlocker, err = h.reader().NewestBlocker(ctx, c.Name, row.Target)
					return err
				})
			}
			return together(after...)
		}}
	} else {
		reads = append(reads, release)
	}
	err := together(reads...)
	if err != nil {
		return row, err
	}
	row.Fleet = fleetLine(fleet)
	row.Newer = newerThan(fleet, row.Current)
	row.Coverage = cov.String()
	row.Unchecked = cov.UncheckedFor(row.Target)
	s := scope{Cluster: c.Name, Week: weekEnding(row.Until.Time), Target: row.Target, Until: row.Until, Days: days}
	row.NewestBlocker = c.NewestBlocker
	if len(bs) == 0 && !c.NewestBlocker.IsZero() && c.NewestBlocker.Before(win.From) {
		// Nothing blocks in the window, but something did before it (a monthly job, an
		// old imported log): show the window that ends with its newest use, and say so.
		row.Earlier, row.EarlierUntil = true, weekly.DateOf(c.NewestBlocker)
		row.EarlierFrom = weekly.Date{Time: row.EarlierUntil.AddDate(0, 0, 1-days)}
		s.Until, s.Week = row.EarlierUntil, weekEnding(row.EarlierUntil.Time)
		var err error
		if bs, err = h.reader().Blockers(ctx, c.Name, s.window(), row.Target); err != nil {
			return row, err
		}
	}
	for _, b := range bs {
		br := blockerRow{Blocker: b, Callers: s.link("/callers", keyQuery(b.Key)...), FailingNow: weekly.FailingAt(b.RemovedIn, row.Current)}
		for _, tc := range b.Top {
			br.Top = append(br.Top, callerLink{Caller: tc, Requests: s.link("/requests", callerQuery(b.Key, tc.ID)...)})
		}
		row.Blockers = append(row.Blockers, br)
		if br.FailingNow {
			row.Failing++
		}
	}
	row.New = len(row.Blockers) - row.Failing
	// What the upgrade breaks first (by the release that removes it when the cluster's is
	// known: the first hop of an upgrade that skips releases first), then what fails already,
	// each busiest first (as read).
	slices.SortStableFunc(row.Blockers, func(a, b blockerRow) int {
		switch {
		case a.FailingNow != b.FailingNow && b.FailingNow:
			return -1
		case a.FailingNow != b.FailingNow:
			return 1
		case a.FailingNow || row.Current.IsZero():
			return 0
		}
		x, _ := weekly.ParseVersion(a.RemovedIn)
		y, _ := weekly.ParseVersion(b.RemovedIn)
		return x.Key() - y.Key()
	})
	if !row.Current.IsZero() && len(row.Blockers) > 0 {
		if row.New > 0 {
			row.Blockers[0].PartHead = fmt.Sprintf("Breaks on the upgrade to %s (removed after %s): %d", row.Target, row.Current, row.New)
		}
		if hops := row.Target.Key() - row.Current.Key(); hops > 1 && row.Target.Major == row.Current.Major {
			// An upgrade that skips releases: a title for each hop, naming those that need nothing.
			row.Hops = hopNotes(row.Blockers[:row.New], row.Current, row.Target)
		}
		if row.Failing > 0 {
			row.Blockers[row.New].PartHead = fmt.Sprintf("Failing now (removed at or before %s, the release the cluster runs: these callers fail today, a removed API with 404): %d",
				row.Current, row.Failing)
		}
	}
	// The report links name no week: the report page chooses the same one and says why.
	q := []string{"cluster", c.Name, "target-version", row.Target.String()}
	row.Report = link("/report", q...)
	if !c.NewestBlocker.IsZero() {
		row.BlockerWeek = link("/report", append(q, "week-ending", weekEnding(c.NewestBlocker).String())...)
	}
	for _, format := range render.Formats {
		row.Formats = append(row.Formats, render.Link{Label: format, URL: link("/report", append(q, "format", format)...)})
	}
	return row, nil
}

// together runs fs side by side and returns the first of their errors.
func together(fs ...func() error) error {
	var g errgroup.Group
	for _, f := range fs {
		g.Go(f)
	}
	return g.Wait()
}

// fleetLine writes the version spread as "kubelet 1.33 (1), 1.37 (12) · kube-proxy 1.34 (3)":
// per component, each release with its callers (nodes, or users for kubectl).
func fleetLine(fs []console.FleetRelease) string {
	var b strings.Builder
	for i, f := range fs {
		switch {
		case i == 0:
			b.WriteString(f.Component + " ")
		case f.Component != fs[i-1].Component:
			b.WriteString(" · " + f.Component + " ")
		default:
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (%d)", f.Release, f.Callers)
	}
	return b.String()
}

// newerThan lists the kubelets and kube-proxies of fs newer than the control plane's release
// current, as fleetLine writes them ("" when none, or current is unknown). kubectl may be one
// release newer: it is not listed.
func newerThan(fs []console.FleetRelease, current weekly.Version) string {
	if current.IsZero() {
		return ""
	}
	var newer []console.FleetRelease
	for _, f := range fs {
		if f.Component != "kubectl" && current.Less(f.Release) {
			newer = append(newer, f)
		}
	}
	return fleetLine(newer)
}

// defaultWeek is the week a cluster's report shows when none is asked for: the last full
// week, else this week so far when the last full week has no findings; when neither has,
// the week of the newest event that blocks the target, else of the newest event.
func defaultWeek(c console.ClusterSummary, lastFull, thisWeek weekly.Date) weekly.Date {
	switch {
	case c.LastWeek:
		return lastFull
	case c.ThisWeek:
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
