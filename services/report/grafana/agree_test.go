package grafana

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"testing"
	"time"

	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/console"
	"github.com/auditlens/auditlens/services/report/rollup"
	"github.com/auditlens/auditlens/services/report/store"
	"github.com/auditlens/auditlens/services/report/weekly"
)

// blockerCount is what each reader says of one blocker: its findings in the window and,
// where the reader counts them alike, its distinct callers (user, user agent, source IP).
type blockerCount struct{ findings, callers uint64 }

// One set of numbers: on the same store, the dashboard's "Upgrade blockers" panel, the
// console's blockers and the weekly report's blockers give each blocker of one week the same
// findings (and the dashboard and the console the same callers), whether the week's days
// are read from their states or from their builds. A caller that moved to the successor
// after its calls (a migration sighting) is fixed for all three; one that went on calling
// blocks.
func TestBlockersAgreeWithConsoleAndWeekly(t *testing.T) {
	d := loadDashboard(t)
	var panel string
	for _, q := range d.Queries {
		if q.Panel == "Upgrade blockers" && q.RefID == "A" {
			panel = q.SQL
		}
	}
	if panel == "" {
		t.Fatal("no Upgrade blockers panel")
	}
	weekStart := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	weekEnd := weekStart.AddDate(0, 0, 7)
	target := "1.35"
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		ctx := context.Background()
		seed(t, st)
		// This week: alice called the old Ingress API on Monday and moved to its successor on
		// Wednesday (fixed); dave called it on Thursday and goes on (blocks).
		dave := caller{"dave", "kubectl/v1.21.0", "default", "10.0.0.6"}
		if err := st.WriteFindings(ctx, []*auditlensv1.Finding{
			mk("prod", "w1", ingress, alice, at(11, 23, 8)), mk("prod", "w2", ingress, alice, at(11, 23, 9)),
			mk("prod", "w3", ingress, dave, at(11, 26, 14)),
		}); err != nil {
			t.Fatal(err)
		}
		if err := st.WriteMigrationSightings(ctx, []store.MigrationSighting{{Cluster: "prod", APIGroup: ingress.group, APIVersion: ingress.version,
			Resource: ingress.resource, Username: alice.user, UserAgent: alice.agent, Seen: at(11, 25, 10)}}); err != nil {
			t.Fatal(err)
		}
		want := map[string]blockerCount{
			"psp policy/v1beta1 podsecuritypolicies":                       {1, 1},
			"removed-api flowcontrol.apiserver.k8s.io/v1beta3 flowschemas": {1, 1},
			"removed-api extensions/v1beta1 ingresses":                     {1, 1}, // dave's; alice's two are fixed
		}
		agree := func(when string) {
			t.Helper()
			fromGrafana := grafanaBlockers(t, st, panel, weekStart, weekEnd, target)
			fromConsole := consoleBlockers(t, st, weekStart, weekEnd, target)
			fromWeekly := weeklyBlockers(t, st, weekEnd.AddDate(0, 0, -1), target)
			if !maps.Equal(fromGrafana, want) {
				t.Errorf("%s: the dashboard's blockers %v, want %v", when, fromGrafana, want)
			}
			if !maps.Equal(fromConsole, fromGrafana) {
				t.Errorf("%s: the console's blockers %v, the dashboard's %v", when, fromConsole, fromGrafana)
			}
			if !maps.Equal(fromWeekly, fromGrafana) {
				t.Errorf("%s: the weekly report's blockers %v, the dashboard's %v", when, fromWeekly, fromGrafana)
			}
		}
		agree("read from the states")
		// The week built, its builds recorded as begun an hour later (past rollup.Margin
		// after the last change): the view and the console read the builds.
		time.Sleep(1100 * time.Millisecond)
		if _, err := rollup.Compact(ctx, st.DB(), rollup.TablesFor("findings")); err != nil {
			t.Fatal(err)
		}
		if _, err := st.DB().ExecContext(ctx, `INSERT INTO finding_builds (cluster, day, until, built, build)
SELECT cluster, day, any(until), toUInt32(max(built) + 3600), argMax(build, built) FROM finding_builds WHERE toDate(until) > day GROUP BY cluster, day`); err != nil {
			t.Fatal(err)
		}
		agree("read from the builds")
	})
}

// grafanaBlockers runs the panel over [from, to) for cluster prod and target.
func grafanaBlockers(t *testing.T, st *store.Store, panel string, from, to time.Time, target string) map[string]blockerCount {
	t.Helper()
	q, err := Expand(panel, Context{From: from, To: to.Add(-time.Second), Interval: time.Hour,
		Vars: map[string][]string{"cluster": {"prod"}, "target_version": {target}}, All: map[string]bool{}})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]blockerCount{}
	for _, r := range runQuery(t, st.DB(), q) {
		// rule, group, version, resource, removed_in, replacement, findings, callers, ...
		n, err1 := strconv.ParseUint(r[6], 10, 64)
		c, err2 := strconv.ParseUint(r[7], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("panel row %v", r)
		}
		out[key(r[0], r[1], r[2], r[3])] = blockerCount{n, c}
	}
	return out
}

func consoleBlockers(t *testing.T, st *store.Store, from, to time.Time, target string) map[string]blockerCount {
	t.Helper()
	v, err := weekly.ParseVersion(target)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := console.Reader{DB: st.DB()}.Blockers(context.Background(), "prod", console.Window{From: from, To: to}, v)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]blockerCount{}
	for _, b := range bs {
		out[key(b.Key.Rule, b.Key.Group, b.Key.Version, b.Key.Resource)] = blockerCount{b.Requests, b.Callers}
	}
	return out
}

// weeklyBlockers are the weekly report's blockers of the week ending on lastDay; it counts
// callers by user, user agent and namespace, which name the same callers here.
func weeklyBlockers(t *testing.T, st *store.Store, lastDay time.Time, target string) map[string]blockerCount {
	t.Helper()
	v, err := weekly.ParseVersion(target)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := weekly.Build(context.Background(), st.DB(), weekly.Options{Cluster: "prod", Target: v, WeekEnding: weekly.DateOf(lastDay),
		Now: func() time.Time { return lastDay }})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]blockerCount{}
	for _, b := range rep.Blockers {
		out[key(b.RuleID, b.APIGroup, b.APIVersion, b.Resource)] = blockerCount{b.Findings, uint64(b.CallerCount)}
	}
	return out
}

func key(rule, group, version, resource string) string {
	if group == "" {
		return fmt.Sprintf("%s %s %s", rule, version, resource)
	}
	return fmt.Sprintf("%s %s/%s %s", rule, group, version, resource)
}
