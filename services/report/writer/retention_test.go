package writer

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/testkit"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/store"
)

// Findings and migration sightings that arrive older than the retention are not written (an
// imported log of past years): counted, acknowledged, not dead-lettered, and no rollup row
// names their callers; the heartbeat's minutes, which are counts, are kept. The clock is the
// tests' now, which the server's TTL does not follow: this package is not run at other dates.
func TestOlderThanTheRetentionIsNotWritten(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		b := openBus(t)
		cfg := testConfig()
		cfg.RetentionDays = 3
		w, _ := startWriter(t, cfg, st, b)
		ctx := context.Background()
		// The writer judges by the tests' clock, the engine's TTL by its own: this package does
		// not run at other dates, so they agree, but not across a midnight (ServerNow waits).
		chtest.ServerNow(t, st.DB())
		now := testkit.Now()
		kept := store.KeptFrom(now, cfg.RetentionDays)
		at := func(id string, ts time.Time) *auditlensv1.Finding {
			f := finding("prod", id, "removed-api")
			f.EventTime = timestamppb.New(ts)
			return f
		}
		hb := &auditlensv1.Heartbeat{Cluster: "prod",
			Minutes: []*auditlensv1.EventMinute{
				{Minute: timestamppb.New(now.AddDate(-2, 0, 0).Truncate(time.Minute)), Events: 7},
				{Minute: timestamppb.New(now.Truncate(time.Minute)), Events: 2},
			},
			Migrations: []*auditlensv1.MigrationSighting{
				{ApiGroup: "extensions", ApiVersion: "v1beta1", Resource: "ingresses", Username: "old", UserAgent: "a", Seen: timestamppb.New(kept.Add(-time.Second))},
				{ApiGroup: "extensions", ApiVersion: "v1beta1", Resource: "ingresses", Username: "new", UserAgent: "a", Seen: timestamppb.New(kept)},
			}}
		msgs := []bus.Message{
			batchMsg("prod", "mixed", at("2019", time.Date(2019, 3, 1, 0, 0, 0, 0, time.UTC)), at("just-expired", kept.Add(-time.Second)),
				at("first-kept", kept), at("now", now)),
			batchMsg("prod", "all-old", at("2017", time.Date(2017, 6, 1, 0, 0, 0, 0, time.UTC))),
			findingMsg("prod", "single-2018", "removed-api", "single"), // t0 is within the retention only if recent
			{Stream: bus.Findings, Cluster: "prod", ID: "hb", Data: mustMarshal(hb),
				Header: map[string]string{auditlensv1.MessageTypeHeader: auditlensv1.HeartbeatMessageType}},
		}
		if err := b.Publish(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, time.Minute, "the heartbeat written", func() bool { return testutil.ToFloat64(w.m.heartbeats) >= 1 })
		singleOld := t0.Before(kept)
		wantExpired := 3.0
		wantFindings := uint64(2)
		if singleOld {
			wantExpired++
		} else {
			wantFindings++
		}
		testkit.Eventually(t, time.Minute, "every finding written or expired", func() bool {
			return testutil.ToFloat64(w.m.expired.WithLabelValues("finding")) >= wantExpired && distinct(t, st) >= wantFindings
		})
		testkit.Eventually(t, time.Minute, "every message acknowledged", func() bool {
			n, err := b.Backlog(ctx, bus.Findings, testConfig().Group)
			return err == nil && n == 0
		})
		if n := distinct(t, st); n != wantFindings {
			t.Errorf("%d findings written, want %d", n, wantFindings)
		}
		if n := testutil.ToFloat64(w.m.expired.WithLabelValues("migration_sighting")); n != 1 {
			t.Errorf("%v migration sightings expired on arrival, want 1", n)
		}
		if n := testutil.ToFloat64(w.m.deadLettered) + testutil.ToFloat64(w.m.invalid); n != 0 {
			t.Errorf("%v messages dead-lettered or invalid, want none: an old finding is not a bad one", n)
		}
		for table, q := range map[string]string{
			"findings":            "SELECT count() FROM findings WHERE event_time < toDateTime(?)",
			"finding_hour_states": "SELECT count() FROM finding_hour_states WHERE hour < toDateTime(?)",
			"caller_names":        "SELECT count() FROM caller_names WHERE seen < toDate(toDateTime(?))",
			"blocker_names":       "SELECT count() FROM blocker_names WHERE seen < toDate(toDateTime(?))",
			"finding_rows":        "SELECT count() FROM finding_rows WHERE day < toDate(toDateTime(?))",
			"finding_requests":    "SELECT count() FROM finding_requests WHERE event_time < toDateTime(?)",
			"migration_sightings": "SELECT count() FROM migration_sightings WHERE seen < toDateTime(?)",
		} {
			var n uint64
			if err := st.DB().QueryRowContext(ctx, q, kept.Unix()).Scan(&n); err != nil || n != 0 {
				t.Errorf("%s: %d rows before the retention, %v; want none", table, n, err)
			}
		}
		var minutes uint64
		if err := st.DB().QueryRowContext(ctx, "SELECT uniqExact(minute) FROM event_minutes").Scan(&minutes); err != nil || minutes != 2 {
			t.Errorf("event minutes %d, %v; want both (counts are kept)", minutes, err)
		}
	})
}
