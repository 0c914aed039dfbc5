package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/store"
)

// TestEventMinutesKeepTheLargestCount: heartbeats written again (a redelivery), with a smaller
// running count (another classify replica) or a larger one (the same replica later) leave one
// row per cluster and minute with the largest count, before and after merges.
func TestEventMinutesKeepTheLargestCount(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		ctx := context.Background()
		m1, m2 := day, day.Add(time.Minute)
		writes := [][]store.EventMinute{
			{{Cluster: "prod", Minute: m1.Add(17 * time.Second), Events: 5}, {Cluster: "quiet", Minute: m1, Events: 1}},
			{{Cluster: "prod", Minute: m1, Events: 5}},  // redelivered
			{{Cluster: "prod", Minute: m1, Events: 2}},  // another replica's share
			{{Cluster: "prod", Minute: m1, Events: 9}},  // the first replica, later
			{{Cluster: "prod", Minute: m2, Events: 40}}, // the next minute
		}
		for _, w := range writes {
			if err := st.WriteEventMinutes(ctx, w); err != nil {
				t.Fatal(err)
			}
		}
		read := func() map[string]uint64 {
			t.Helper()
			rows, err := st.DB().QueryContext(ctx, `SELECT toString(cluster), toUInt32(minute), max(events) FROM event_minutes GROUP BY cluster, minute ORDER BY 1, 2`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			got := map[string]uint64{}
			for rows.Next() {
				var c string
				var m uint32
				var n uint64
				if err := rows.Scan(&c, &m, &n); err != nil {
					t.Fatal(err)
				}
				got[c+" "+time.Unix(int64(m), 0).UTC().Format("15:04:05")] = n
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return got
		}
		want := map[string]uint64{"prod 10:00:00": 9, "prod 10:01:00": 40, "quiet 10:00:00": 1}
		check := func(when string) {
			t.Helper()
			got := read()
			if len(got) != len(want) {
				t.Errorf("%s: %v, want %v", when, got, want)
			}
			for k, n := range want {
				if got[k] != n {
					t.Errorf("%s: %s has %d events, want %d", when, k, got[k], n)
				}
			}
		}
		check("before merges")
		if _, err := st.DB().ExecContext(ctx, "OPTIMIZE TABLE event_minutes FINAL"); err != nil {
			t.Fatal(err)
		}
		check("after OPTIMIZE FINAL")
		var rows uint64
		if err := st.DB().QueryRowContext(ctx, "SELECT count() FROM event_minutes").Scan(&rows); err != nil || rows != 3 {
			t.Errorf("%d rows after OPTIMIZE FINAL (%v), want 3", rows, err)
		}
	})
}
