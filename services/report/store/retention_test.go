package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/kubeversion"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/rollup"
	"github.com/auditlens/auditlens/services/report/store"
)

// callerColumns are the columns that name a caller or what one touched: a table that has one
// holds personal data and must follow --retention-days.
var callerColumns = []string{"username", "user_agent", "source_ip", "namespace", "name", "audit_id", "request_uri", "caller"}

// notCallers are the columns of callerColumns' names that name something else.
var notCallers = map[string]string{"schema_migrations": "name"} // a migration's name

// TestEveryTableHasARetention lists every table of a migrated store and checks that
// store.Tables names it, that a table with a column naming callers is a Callers table, and
// that each Day expression reads on its table: a table added to the schema cannot forget
// its retention.
func TestEveryTableHasARetention(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		ctx := context.Background()
		rows, err := st.DB().QueryContext(ctx, `SELECT name, engine FROM system.tables WHERE database = ? ORDER BY name`, st.Database())
		if err != nil {
			t.Fatal(err)
		}
		var tables []string
		for rows.Next() {
			var name, engine string
			if err := rows.Scan(&name, &engine); err != nil {
				t.Fatal(err)
			}
			if engine != "MaterializedView" && engine != "View" {
				tables = append(tables, name)
			}
		}
		_ = rows.Close()
		if len(tables) < len(store.Tables)-1 {
			t.Fatalf("%d tables in %s, want the whole schema: %v", len(tables), st.Database(), tables)
		}
		known := map[string]store.RetainedTable{}
		for _, tb := range store.Tables {
			known[tb.Name] = tb
		}
		for _, name := range tables {
			tb, ok := known[name]
			if !ok {
				t.Errorf("table %s is not in store.Tables: say what it holds (callers, counts or ledger) and which day a row belongs to", name)
				continue
			}
			delete(known, name)
			cols := columnsOf(t, st, name)
			if tb.Holds != store.Callers {
				for _, c := range cols {
					if slices.Contains(callerColumns, c) && notCallers[name] != c {
						t.Errorf("table %s holds %s but has column %s, which names callers: it must be a Callers table", name, tb.Holds, c)
					}
				}
			}
			if tb.Holds == store.Ledger {
				continue
			}
			var n uint64
			if err := st.DB().QueryRowContext(ctx, "SELECT count() FROM "+st.Table(name)+" WHERE "+tb.Day()+" < toDate('2000-01-01')").Scan(&n); err != nil {
				t.Errorf("the day of a row of %s (%s) does not read: %v", name, tb.Day(), err)
			}
		}
		for name := range known {
			t.Errorf("store.Tables names %s, which the schema does not create", name)
		}
	})
}

func columnsOf(t *testing.T, st *store.Store, table string) []string {
	t.Helper()
	rows, err := st.DB().QueryContext(context.Background(), "SELECT name FROM system.columns WHERE database = ? AND table = ?", st.Database(), table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

func TestKeptFrom(t *testing.T) {
	for _, c := range []struct {
		now  string
		days int
		want string
	}{
		{"2026-12-05T22:00:00Z", 1, "2026-12-05"},
		{"2026-12-05T00:00:00Z", 3, "2026-12-03"},
		{"2028-03-01T23:59:59Z", 2, "2028-02-29"},
		{"2027-01-01T00:00:30Z", 400, "2025-11-28"},
	} {
		now, _ := time.Parse(time.RFC3339, c.now)
		if got := store.KeptFrom(now, c.days).Format(time.DateOnly); got != c.want {
			t.Errorf("KeptFrom(%s, %d) = %s, want %s", c.now, c.days, got, c.want)
		}
	}
	if !store.KeptFrom(testkit.Now(), 0).IsZero() {
		t.Error("KeptFrom with no retention: want the zero time (everything kept)")
	}
}

// retentionFixture writes, by the engine's clock (its TTL and Expire use it), findings,
// migration sightings and event minutes on days past a retention of 3 days and within it, and
// builds the rollup's days; it returns the first day kept.
func retentionFixture(t *testing.T, st *store.Store) time.Time {
	t.Helper()
	ctx := context.Background()
	now := chtest.ServerNow(t, st.DB())
	kept := store.KeptFrom(now, 3)
	old := []time.Time{now.AddDate(0, 0, -40), now.AddDate(0, 0, -10), kept.Add(-time.Second)}
	recent := []time.Time{kept, now.Add(-time.Minute)}
	var b store.Block
	for i, at := range append(slices.Clone(old), recent...) {
		b.Append(finding("removed-api", fmt.Sprintf("a%d", i), fmt.Sprintf("system:serviceaccount:ops:user-%d", i), at))
	}
	if err := st.WriteBlock(ctx, &b); err != nil {
		t.Fatal(err)
	}
	var moves []store.MigrationSighting
	var minutes []store.EventMinute
	for _, at := range append(slices.Clone(old), recent...) {
		moves = append(moves, store.MigrationSighting{Cluster: "prod", APIGroup: "policy", APIVersion: "v1beta1", Resource: "podsecuritypolicies",
			Username: "mover", UserAgent: "helm/3", Seen: at})
		minutes = append(minutes, store.EventMinute{Cluster: "prod", Minute: at.Truncate(time.Minute), Events: 5})
	}
	if err := st.WriteMigrationSightings(ctx, moves); err != nil {
		t.Fatal(err)
	}
	if err := st.WriteEventMinutes(ctx, minutes); err != nil {
		t.Fatal(err)
	}
	if err := st.WriteControlPlaneSightings(ctx, []store.ControlPlaneSighting{{Cluster: "prod", Component: "kube-apiserver", Version: kubeversion.MustParse("1.30"), Seen: old[0]}}); err != nil {
		t.Fatal(err)
	}
	// The days that are over become builds, as the compactor leaves them.
	if _, err := rollup.Compact(ctx, st.DB(), rollup.TablesFor(st.Table("findings"))); err != nil {
		t.Fatal(err)
	}
	return kept
}

// callersBefore counts, per Callers table (its name plus suffix: "_local" reads one server's
// part on a cluster), the rows of days before kept.
func callersBefore(t *testing.T, db *sql.DB, database, suffix string, kept time.Time) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, tb := range store.Tables {
		if tb.Holds != store.Callers {
			continue
		}
		var n uint64
		q := "SELECT count() FROM " + database + "." + tb.Name + suffix + " WHERE " + tb.Day() + " < toDate('" + kept.Format(time.DateOnly) + "')"
		if err := db.QueryRowContext(context.Background(), q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			out[tb.Name] = n
		}
	}
	return out
}

// TestRetentionLeavesNoCallerOfExpiredDays: with a retention of 3 days, after Expire no table
// that names callers holds a row of an earlier day, on every engine; the counts and the days
// kept stay, and the rollup's readers agree at once.
func TestRetentionLeavesNoCallerOfExpiredDays(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		ctx := context.Background()
		if _, err := st.Migrate(ctx, store.MigrateOptions{RetentionDays: 3}); err != nil {
			t.Fatal(err)
		}
		kept := retentionFixture(t, st)
		// The readers start at the first day kept whatever the tables still hold.
		tables := rollup.TablesFor(st.Table("findings"))
		from, days, err := rollup.KeptFrom(ctx, st.DB(), tables)
		if err != nil || days != 3 || !from.Equal(kept) {
			t.Fatalf("rollup.KeptFrom = %s, %d, %v; want %s, 3", from, days, err, kept)
		}
		src, args, err := rollup.Days(ctx, st.DB(), tables, rollup.Filter{Cluster: "prod", From: kept.AddDate(0, 0, -60), To: kept.AddDate(0, 0, 5)})
		if err != nil {
			t.Fatal(err)
		}
		var findings uint64
		if err := st.DB().QueryRowContext(ctx, "SELECT toUInt64(sum(findings)) FROM ("+src+")", args...).Scan(&findings); err != nil || findings != 2 {
			t.Errorf("findings the rollup gives over 60 days: %d, %v; want the 2 kept", findings, err)
		}
		expired, err := st.Expire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if left := callersBefore(t, st.DB(), st.Database(), "", kept); len(left) > 0 {
			t.Errorf("rows naming callers left before %s after Expire: %v", kept.Format(time.DateOnly), left)
		}
		ver, err := st.Version(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !ver.Modern() && len(expired) == 0 {
			t.Errorf("Expire on %s deleted nothing: without TTL it is the retention", ver)
		}
		// What is kept stays: the recent findings, their rollup, the counts of every day.
		var recent, minutes, sightings uint64
		if err := st.DB().QueryRowContext(ctx, "SELECT uniqExact(audit_id) FROM "+st.Table("findings")).Scan(&recent); err != nil || recent != 2 {
			t.Errorf("findings kept: %d, %v; want 2", recent, err)
		}
		if err := st.DB().QueryRowContext(ctx, "SELECT uniqExact(minute) FROM "+st.Table("event_minutes")).Scan(&minutes); err != nil || minutes != 5 {
			t.Errorf("event minutes (counts, kept forever): %d, %v; want 5", minutes, err)
		}
		if err := st.DB().QueryRowContext(ctx, "SELECT count() FROM "+st.Table("control_plane_sightings")).Scan(&sightings); err != nil || sightings != 1 {
			t.Errorf("control-plane sightings (counts, kept forever): %d, %v; want 1", sightings, err)
		}
		if again, err := st.Expire(ctx); err != nil || len(again) != 0 {
			t.Errorf("a second Expire: %v, %v; want nothing to delete", again, err)
		}
	})
}

// TestRetentionOfCounts: --counts-retention-days expires the counts too, and only them.
func TestRetentionOfCounts(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		ctx := context.Background()
		kept := retentionFixture(t, st) // written with everything kept
		if _, err := st.Migrate(ctx, store.MigrateOptions{CountsRetentionDays: 3}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Expire(ctx); err != nil {
			t.Fatal(err)
		}
		var minutes, oldFindings uint64
		if err := st.DB().QueryRowContext(ctx, "SELECT uniqExact(minute) FROM "+st.Table("event_minutes")).Scan(&minutes); err != nil || minutes != 2 {
			t.Errorf("event minutes after a counts retention of 3 days: %d, %v; want the 2 kept", minutes, err)
		}
		if err := st.DB().QueryRowContext(ctx, "SELECT uniqExact(audit_id) FROM "+st.Table("findings")+" WHERE event_time < toDateTime(?)", kept.Unix()).Scan(&oldFindings); err != nil || oldFindings != 3 {
			t.Errorf("old findings with callers kept forever: %d, %v; want 3", oldFindings, err)
		}
		if !strings.Contains(fmt.Sprint(callersBefore(t, st.DB(), st.Database(), "", kept)), "findings:3") {
			t.Errorf("the callers' tables should keep their old rows")
		}
	})
}
