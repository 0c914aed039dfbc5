package readiness_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/testkit"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/console"
	"github.com/auditlens/auditlens/services/report/readiness"
	"github.com/auditlens/auditlens/services/report/store"
	"github.com/auditlens/auditlens/services/report/weekly"
)

// A cluster whose every event lies before the retention (an imported log of 2019, written
// before the retention was set, so its findings and rollup rows are still stored): the gate,
// the weekly report and the console agree that nothing is there, name no caller, and say why.
func TestEventsOlderThanTheRetentionAreNamedAlike(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		ctx := context.Background()
		old := time.Date(2019, 3, 1, 10, 0, 0, 0, time.UTC)
		if err := st.WriteFindings(ctx, seedOld(old)); err != nil {
			t.Fatal(err)
		}
		if err := st.WriteEventMinutes(ctx, []store.EventMinute{{Cluster: "old", Minute: old, Events: 40}, {Cluster: "old", Minute: old.AddDate(1, 0, 0), Events: 2}}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Migrate(ctx, store.MigrateOptions{RetentionDays: 30}); err != nil {
			t.Fatal(err)
		}
		const said = "42 events of 2019 to 2020 arrived, all older than the retention (--retention-days 30 keeps "
		now := testkit.Now
		target := weekly.Version{Major: 1, Minor: 22}
		g, err := readiness.Evaluate(ctx, st.DB(), readiness.Options{Cluster: "old", Target: target, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if g.State != readiness.Unknown || len(g.Blockers) != 0 || !strings.Contains(g.Message, said) {
			t.Errorf("gate: %s, %d blockers, %q; want unknown, none, saying %q", g.State, len(g.Blockers), g.Message, said)
		}
		rep, err := weekly.Build(ctx, st.DB(), weekly.Options{Cluster: "old", Target: target, WeekEnding: weekly.LastWeekEnding(now()), Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Blockers) != 0 || !strings.Contains(rep.Coverage, said) {
			t.Errorf("weekly: %d blockers, coverage %q; want none, saying %q", len(rep.Blockers), rep.Coverage, said)
		}
		// The console over the whole of 2019 and 2020: the readers start at the first day kept.
		r := console.Reader{DB: st.DB(), Table: st.Table("findings"), EventMinutesTable: st.Table("event_minutes")}
		bs, err := r.Blockers(ctx, "old", console.Window{From: old.AddDate(0, -1, 0), To: old.AddDate(2, 0, 0)}, target)
		if err != nil || len(bs) != 0 {
			t.Errorf("console blockers of 2019-2020: %v, %v; want none", bs, err)
		}
		cov, err := r.Coverage(ctx, "old", console.Window{From: old, To: old.AddDate(0, 0, 7)})
		if err != nil || !strings.Contains(cov.String(), said) {
			t.Errorf("console coverage %q, %v; want it to say %q", cov.String(), err, said)
		}
		// A cluster with an event kept says nothing of the kind.
		if err := st.WriteEventMinutes(ctx, []store.EventMinute{{Cluster: "old", Minute: now().UTC().Truncate(time.Minute), Events: 1}}); err != nil {
			t.Fatal(err)
		}
		if x, err := r.Expired(ctx, "old"); err != nil || x.Events != 0 {
			t.Errorf("with an event kept: %+v, %v; want nothing said", x, err)
		}
	})
}

func seedOld(at time.Time) []*auditlensv1.Finding {
	return []*auditlensv1.Finding{
		f("old", "removed-api", "o1", "extensions", "v1beta1", "ingresses", "1.22", "system:serviceaccount:ops:legacy", "legacy/1.0", "ops", at),
		f("old", "removed-api", "o2", "extensions", "v1beta1", "ingresses", "1.22", "alice@example.com", "kubectl/v1.18.0", "ops", at.Add(time.Hour)),
	}
}
