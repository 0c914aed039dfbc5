package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/kubeversion"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/store"
)

// TestControlPlaneSightingsKeepTheNewestMinute: sightings written again (a redelivery), older
// (another classify replica, a late event) and newer (the next minute) leave one row per
// cluster, component, release and day with its newest minute, before and after merges; a
// rollback is the older release with the newer minute.
func TestControlPlaneSightingsKeepTheNewestMinute(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		ctx := context.Background()
		v := kubeversion.MustParse
		api := func(cluster, version string, at time.Duration) store.ControlPlaneSighting {
			return store.ControlPlaneSighting{Cluster: cluster, Component: "kube-apiserver", Version: v(version), Seen: day.Add(at)}
		}
		writes := [][]store.ControlPlaneSighting{
			{api("prod", "1.36", 17*time.Second), api("quiet", "1.35", 0),
				{Cluster: "prod", Component: "kube-scheduler", Version: v("1.36"), Seen: day}},
			{api("prod", "1.36", 0)},              // redelivered
			{api("prod", "1.36", -time.Hour)},     // a late event of another replica
			{api("prod", "1.37", 2*time.Minute)},  // the upgrade
			{api("prod", "1.36", 5*time.Minute)},  // and its rollback
			{api("prod", "1.37", 90*time.Second)}, // an older sighting of the upgrade
			{api("prod", "1.36", -24*time.Hour)},  // the day before: a row of its own
		}
		for _, w := range writes {
			if err := st.WriteControlPlaneSightings(ctx, w); err != nil {
				t.Fatal(err)
			}
		}
		read := func() map[string]string {
			t.Helper()
			rows, err := st.DB().QueryContext(ctx, `SELECT toString(cluster), toString(component), version, toUInt32(max(seen))
FROM control_plane_sightings GROUP BY cluster, component, version ORDER BY 1, 2, 3`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			got := map[string]string{}
			for rows.Next() {
				var c, comp, ver string
				var s uint32
				if err := rows.Scan(&c, &comp, &ver, &s); err != nil {
					t.Fatal(err)
				}
				got[c+" "+comp+" "+ver] = time.Unix(int64(s), 0).UTC().Format("15:04:05")
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return got
		}
		want := map[string]string{
			"prod kube-apiserver 1.36":  "10:05:00",
			"prod kube-apiserver 1.37":  "10:02:00",
			"prod kube-scheduler 1.36":  "10:00:00",
			"quiet kube-apiserver 1.35": "10:00:00",
		}
		check := func(when string) {
			t.Helper()
			if got := read(); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s:\n got %v\nwant %v", when, got, want)
			}
		}
		check("before merges")
		// OPTIMIZE FINAL does nothing, without an error, while a background merge of the table
		// runs (seen on ClickHouse 18.16 in CI): it is asked again until the parts are one.
		var rows uint64
		for try := 0; try < 50; try++ {
			if _, err := st.DB().ExecContext(ctx, "OPTIMIZE TABLE control_plane_sightings FINAL"); err != nil {
				t.Fatal(err)
			}
			if err := st.DB().QueryRowContext(ctx, "SELECT count() FROM control_plane_sightings").Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if rows <= 5 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		check("after OPTIMIZE FINAL")
		if rows != 5 {
			t.Errorf("%d rows after OPTIMIZE FINAL, want 5 (one per release and day)", rows)
		}
	})
}
