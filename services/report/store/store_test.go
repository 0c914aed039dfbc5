package store_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/store"
)

func TestMain(m *testing.M) { chtest.Main(m) }

var day = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

func finding(rule, audit, user string, at time.Time) *auditlensv1.Finding {
	return &auditlensv1.Finding{
		RuleId: rule, Severity: auditlensv1.Severity_SEVERITY_CRITICAL, Cluster: "prod",
		AuditId: audit, EventTime: timestamppb.New(at), Verb: "list",
		RequestUri: "/apis/policy/v1beta1/podsecuritypolicies", ApiGroup: "policy", ApiVersion: "v1beta1",
		Resource: "podsecuritypolicies", Username: user, UserAgent: "kubectl/v1.24.0", SourceIp: "10.0.0.1",
		ResponseCode: 200, DeprecatedIn: "1.21", RemovedIn: "1.25", Replacement: "Pod Security Admission",
		Message: "migrate", Stage: "ResponseComplete", Confidence: auditlensv1.Confidence_CONFIDENCE_HIGH,
		Evidence: []*auditlensv1.Evidence{{Path: "objectRef.apiVersion", Value: "v1beta1"}},
	}
}

// The steps since the day states went may run again whole on a store they were applied to
// and no later step (a step interrupted and repeated): none reads a table it drops, a column
// added is taken as added, and a copy of states counts each finding once.
func TestStepRunsAgain(t *testing.T) {
	all := store.Migrations
	defer func() { store.Migrations = all }()
	for _, v := range []int{15, 16, 17, 18, 19} {
		store.Migrations = nil
		for _, m := range all {
			if m.Version <= v {
				store.Migrations = append(store.Migrations, m)
			}
		}
		chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
			if err := store.ApplyAgain(context.Background(), st, v); err != nil {
				t.Errorf("migration %d again: %v", v, err)
			}
		})
	}
}

func TestMigrateIsIdempotent(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		ctx := context.Background()
		did, err := st.Migrate(ctx, store.MigrateOptions{RetentionDays: 30})
		if err != nil {
			t.Fatal(err)
		}
		if len(did) != 0 {
			t.Errorf("second Migrate applied %v, want nothing", did)
		}
		applied, err := st.AppliedMigrations(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range store.Migrations {
			if !applied[m.Version] {
				t.Errorf("migration %d not recorded", m.Version)
			}
		}
		var tables []string
		rows, err := st.DB().QueryContext(ctx, "SELECT name FROM system.tables WHERE database = ? ORDER BY name", st.Database())
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			tables = append(tables, n)
		}
		rows.Close()
		for _, want := range []string{"findings", "weekly_reports", "schema_migrations", "event_minutes",
			"finding_rows", "finding_builds", "finding_requests",
			"finding_hour_states", "finding_hour_changes", "blocker_names", "caller_names", "control_plane_sightings", "coverage_sightings", "migration_sightings", "review_sightings",
			"finding_days_current"} {
			if !slices.Contains(tables, want) {
				t.Errorf("table %s missing; have %v", want, tables)
			}
		}
		// Every materialized view of the schema reads the inserts into findings: each costs
		// every insert, at most six of them.
		var views []string
		if err := st.DB().QueryRowContext(ctx, "SELECT groupArray(name) FROM system.tables WHERE database = ? AND engine = 'MaterializedView'", st.Database()).Scan(&views); err != nil {
			t.Fatal(err)
		}
		if len(views) > 6 {
			t.Errorf("%d materialized views fire on an insert into findings, want at most 6: %v", len(views), views)
		}
		for _, gone := range []string{"daily_rules", "daily_apis", "daily_callers", "daily_rules_mv", "daily_apis_mv", "daily_callers_mv"} {
			if slices.Contains(tables, gone) {
				t.Errorf("%s is still there: migration 13 retires it", gone)
			}
		}
		// The rollup owns four tables (migrations 15 and 16 retired the other six): the hour
		// states and their change times, the builds and their rows.
		var rollupTables []string
		for _, n := range tables {
			if strings.HasPrefix(n, "finding_") && !strings.HasSuffix(n, "_mv") && n != "finding_requests" && n != "finding_days_current" {
				rollupTables = append(rollupTables, n)
			}
		}
		if want := []string{"finding_builds", "finding_hour_changes", "finding_hour_states", "finding_rows"}; !slices.Equal(rollupTables, want) {
			t.Errorf("rollup tables %v, want %v", rollupTables, want)
		}
		ret, err := st.Retention(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := (store.Retention{Callers: 30}); ret != want {
			t.Errorf("retention %+v on %s, want %+v", ret, e, want)
		}
		ver, err := st.Version(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Each table has the TTL of what it holds, where the server has TTL.
		checkTTLs := func(when string, r store.Retention) {
			t.Helper()
			for _, tb := range store.Tables {
				ttl, err := store.TTLOf(ctx, st, tb.Name)
				if err != nil {
					t.Fatal(err)
				}
				want := ""
				if d := r.Days(tb.Holds); ver.Modern() && d > 0 {
					want = fmt.Sprintf("+ toIntervalDay(%d)", d)
				}
				if (want == "") != (ttl == "") || !strings.HasSuffix(ttl, want) {
					t.Errorf("TTL of %s on %s %s %s: %q, want one ending in %q", tb.Name, e, ver, when, ttl, want)
				}
			}
		}
		checkTTLs("with 30 days for callers", store.Retention{Callers: 30})
		if _, err := st.Migrate(ctx, store.MigrateOptions{RetentionDays: 0, CountsRetentionDays: 700}); err != nil {
			t.Fatal(err)
		}
		if ret, _ := st.Retention(ctx); ret != (store.Retention{Counts: 700}) {
			t.Errorf("retention after setting none for callers and 700 days for counts: %+v", ret)
		}
		checkTTLs("after the change to 700 days for counts", store.Retention{Counts: 700})
	})
}

func TestDuplicatesCountOnce(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		ctx := context.Background()
		batch := []*auditlensv1.Finding{
			finding("psp", "a1", "alice", day),
			finding("psp", "a2", "alice", day.Add(time.Hour)),
			finding("removed-api", "a1", "bob", day), // same audit event, other rule: distinct
		}
		for range 3 { // delivered three times, in separate blocks
			if err := st.WriteFindings(ctx, batch); err != nil {
				t.Fatal(err)
			}
		}
		// and once more inside one block
		if err := st.WriteFindings(ctx, append(slices.Clone(batch), batch...)); err != nil {
			t.Fatal(err)
		}
		var raw, exact uint64
		if err := st.DB().QueryRowContext(ctx, "SELECT count(), uniqExact(cluster, rule_id, audit_id) FROM findings").Scan(&raw, &exact); err != nil {
			t.Fatal(err)
		}
		if raw < 3 || exact != 3 {
			t.Errorf("rows %d, distinct findings %d; want 3 distinct", raw, exact)
		}
		var final uint64
		if err := st.DB().QueryRowContext(ctx, "SELECT count() FROM findings FINAL").Scan(&final); err != nil {
			t.Fatal(err)
		}
		if final != 3 {
			t.Errorf("count() FINAL = %d, want 3", final)
		}
		type ruleCount struct {
			rule        string
			n           uint64
			first, last time.Time
		}
		// The exact day rows (rollup.View) count each finding once too.
		rows, err := st.DB().QueryContext(ctx, `SELECT rule_id, toUInt64(sum(findings)), min(first_seen), max(last_seen)
			FROM finding_days_current WHERE cluster = ? GROUP BY rule_id ORDER BY rule_id`, "prod")
		if err != nil {
			t.Fatal(err)
		}
		var got []ruleCount
		for rows.Next() {
			var r ruleCount
			if err := rows.Scan(&r.rule, &r.n, &r.first, &r.last); err != nil {
				t.Fatal(err)
			}
			got = append(got, r)
		}
		rows.Close()
		want := []ruleCount{{"psp", 2, day, day.Add(time.Hour)}, {"removed-api", 1, day, day}}
		if len(got) != len(want) {
			t.Fatalf("finding_days_current: %+v, want %+v", got, want)
		}
		for i := range want {
			if got[i].rule != want[i].rule || got[i].n != want[i].n || !got[i].first.Equal(want[i].first) || !got[i].last.Equal(want[i].last) {
				t.Errorf("finding_days_current row %d: %+v, want %+v", i, got[i], want[i])
			}
		}
		var apiFindings, apiCallers uint64
		if err := st.DB().QueryRowContext(ctx, "SELECT toUInt64(sum(findings)), uniqExact(username) FROM finding_days_current WHERE rule_id = 'psp' AND removed_in_key = ?", store.VersionKey("1.25")).Scan(&apiFindings, &apiCallers); err != nil {
			t.Fatal(err)
		}
		if apiFindings != 2 || apiCallers != 1 {
			t.Errorf("finding_days_current psp: %d findings %d callers, want 2 and 1", apiFindings, apiCallers)
		}
	})
}

func TestHostileStringsStoredVerbatim(t *testing.T) {
	hostile := []string{
		`<script>alert("x")</script>`,
		`'; DROP TABLE findings; --`,
		`O'Brien \' \\ "quoted" ? {p:String}`,
		"tab\there\nnewline\x00nul",
		"not utf-8: \xff\xfe",
	}
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		ctx := context.Background()
		var fs []*auditlensv1.Finding
		for i, h := range hostile {
			f := finding("psp", fmt.Sprintf("h%d", i), h, day)
			f.UserAgent = h
			f.Evidence = []*auditlensv1.Evidence{{Path: h, Value: h}}
			fs = append(fs, f)
		}
		if err := st.WriteFindings(ctx, fs); err != nil {
			t.Fatal(err)
		}
		for i, h := range hostile {
			var user, ua string
			var ev []string
			err := st.DB().QueryRowContext(ctx, "SELECT username, user_agent, evidence_value FROM findings WHERE audit_id = ? AND username = ?", fmt.Sprintf("h%d", i), h).Scan(&user, &ua, &ev)
			if err != nil {
				t.Fatalf("%q: %v", h, err)
			}
			if user != h || ua != h || len(ev) != 1 || ev[0] != h {
				t.Errorf("stored %q %q %q, want %q", user, ua, ev, h)
			}
		}
		var n uint64
		if err := st.DB().QueryRowContext(ctx, "SELECT uniqExact(audit_id) FROM findings").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != uint64(len(hostile)) {
			t.Errorf("%d findings, want %d (table intact)", n, len(hostile))
		}
	})
}

// TestScanTypes pins the Go types both engines hand to Scan, which the weekly report relies on.
func TestScanTypes(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		ctx := context.Background()
		var (
			s   string
			u64 uint64
			u32 uint32
			i32 int32
			f   float64
			d   time.Time
			dt  time.Time
			arr []string
			n   int
		)
		err := st.DB().QueryRowContext(ctx, `SELECT toString(?), toUInt64(?), toUInt32(7), toInt32(-3), 1.5,
			toDate(?), toDateTime(?, 'UTC'), ['a', ?], count() FROM system.one`,
			"x", 42, "2026-11-23", "2026-11-23 10:00:00", "b").Scan(&s, &u64, &u32, &i32, &f, &d, &dt, &arr, &n)
		if err != nil {
			t.Fatal(err)
		}
		if s != "x" || u64 != 42 || u32 != 7 || i32 != -3 || f != 1.5 || n != 1 {
			t.Errorf("scalars: %q %d %d %d %v %d", s, u64, u32, i32, f, n)
		}
		if !d.Equal(time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)) || !dt.Equal(day) {
			t.Errorf("times: %v %v", d, dt)
		}
		if !slices.Equal(arr, []string{"a", "b"}) {
			t.Errorf("array: %q", arr)
		}
		// A time.Time argument compares with DateTime columns the same way on both engines.
		var ok uint8
		if err := st.DB().QueryRowContext(ctx, "SELECT toDateTime('2026-11-23 10:00:00', 'UTC') = ?", day).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		if ok != 1 {
			t.Errorf("time argument did not match")
		}
	})
}

func TestVersionKey(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint32
	}{{"1.22", 1022}, {"v1.25.3", 1025}, {"", 0}, {"1", 0}, {"x.y", 0}, {"2.0", 2000}} {
		if got := store.VersionKey(c.in); got != c.want {
			t.Errorf("VersionKey(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

// TestVersionKeySQL checks that the SQL form orders versions like VersionKey on both engines.
func TestVersionKeySQL(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		for _, v := range []string{"1.22", "v1.25.3", "", "1", "x.y", "1.9", "1.16"} {
			var got uint32
			if err := st.DB().QueryRow("SELECT toUInt32("+store.VersionKeySQL("?")+")", v, v, v).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if want := store.VersionKey(v); got != want {
				t.Errorf("%s: SQL key of %q = %d, Go %d", e, v, got, want)
			}
		}
	})
}

// TestWriteBlockStoresEveryColumn writes findings decoded from protobuf bytes and reads every
// column back, on both engines (the server takes the block column by column, chDB row by row).
func TestWriteBlockStoresEveryColumn(t *testing.T) {
	full := finding("removed-api", "full", "system:serviceaccount:a:b", day.Add(1500*time.Millisecond))
	full.Severity, full.Confidence = auditlensv1.Severity_SEVERITY_WARNING, 9
	full.Subresource, full.Namespace, full.Name, full.Node = "status", "team-a", "web", "cp-1"
	full.ResponseCode, full.RemovedIn = 422, "v1.22.3"
	full.RequestReceived = day.Unix() + 1
	full.Evidence = append(full.Evidence, &auditlensv1.Evidence{Path: "p2", Value: "v2"}, &auditlensv1.Evidence{})
	bare := &auditlensv1.Finding{RuleId: "psp", AuditId: "bare"} // no event time, cluster from the message
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		ctx := context.Background()
		var b store.Block
		for _, f := range []*auditlensv1.Finding{full, bare} {
			data, err := proto.Marshal(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.AppendWire(data, "staging"); err != nil {
				t.Fatal(err)
			}
		}
		before := time.Now().UTC().Truncate(time.Second)
		if err := st.WriteBlock(ctx, &b); err != nil {
			t.Fatal(err)
		}
		type row struct {
			rule, sev, cluster, audit                          string
			et                                                 time.Time
			verb, uri, group, version, resource, sub, ns, name string
			user, agent, ip                                    string
			code                                               int32
			depr, removed                                      string
			key                                                uint32
			repl, msg, stage, node, conf                       string
			paths, values                                      []string
			ingested                                           time.Time
			received                                           uint32
		}
		read := func(audit string) row {
			var r row
			err := st.DB().QueryRowContext(ctx, "SELECT "+strings.Join(store.FindingColumns, ", ")+" FROM findings WHERE audit_id = ?", audit).Scan(
				&r.rule, &r.sev, &r.cluster, &r.audit, &r.et, &r.verb, &r.uri, &r.group, &r.version, &r.resource, &r.sub, &r.ns, &r.name,
				&r.user, &r.agent, &r.ip, &r.code, &r.depr, &r.removed, &r.key, &r.repl, &r.msg, &r.stage, &r.node, &r.conf,
				&r.paths, &r.values, &r.ingested, &r.received)
			if err != nil {
				t.Fatalf("read %s: %v", audit, err)
			}
			return r
		}
		got := read("full")
		want := row{"removed-api", "warning", "prod", "full", day.Add(time.Second), "list", full.RequestUri, "policy", "v1beta1",
			"podsecuritypolicies", "status", "team-a", "web", full.Username, "kubectl/v1.24.0", "10.0.0.1", 422, "1.21", "v1.22.3", 1022,
			"Pod Security Admission", "migrate", "ResponseComplete", "cp-1", "9",
			[]string{"objectRef.apiVersion", "p2", ""}, []string{"v1beta1", "v2", ""}, got.ingested, uint32(day.Unix() + 1)}
		if !got.et.Equal(want.et) || !got.ingested.After(before.Add(-time.Second)) {
			t.Errorf("event_time %v, ingested_at %v", got.et, got.ingested)
		}
		got.et = want.et
		if !reflect.DeepEqual(got, want) {
			t.Errorf("stored\n%+v\nwant\n%+v", got, want)
		}
		b2 := read("bare")
		if b2.cluster != "staging" || !b2.et.Equal(b2.ingested) || len(b2.paths) != 0 || b2.sev != "" || b2.conf != "" || b2.received != 0 {
			t.Errorf("finding without event time, cluster, evidence: %+v", b2)
		}
	})
}
