package rollup_test

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/auditlens/auditlens/lib/testkit"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/rollup"
	"github.com/auditlens/auditlens/services/report/store"
)

func TestMain(m *testing.M) { chtest.Main(m) }

// finding is one finding of cluster prod on rule removed-api unless changed.
func finding(id, user, agent, ip string, at time.Time) *auditlensv1.Finding {
	return &auditlensv1.Finding{
		RuleId: "removed-api", Cluster: "prod", AuditId: id, EventTime: timestamppb.New(at),
		Severity: auditlensv1.Severity_SEVERITY_CRITICAL, Verb: "list",
		ApiGroup: "extensions", ApiVersion: "v1beta1", Resource: "ingresses", RemovedIn: "1.22",
		Replacement: "networking.k8s.io/v1", Message: "migrate ingresses",
		Username: user, UserAgent: agent, Namespace: "web", SourceIp: ip, Stage: "ResponseComplete",
	}
}

// seed returns findings over the five days before today and today: repeated deliveries, a
// second rule on the same audit id, another cluster, hostile callers, and the first and last
// second of a day.
func seed(today time.Time) []*auditlensv1.Finding {
	var out []*auditlensv1.Finding
	for d := 5; d >= 0; d-- {
		day := today.AddDate(0, 0, -d)
		for i := 0; i < 20; i++ {
			at := day.Add(time.Duration(i*71) * time.Minute)
			f := finding(fmt.Sprintf("d%d-%d", d, i), fmt.Sprintf("system:serviceaccount:ns%d:sa", i%3), "client-go/v0.19", fmt.Sprintf("10.0.0.%d", i%2), at)
			out = append(out, f)
			if i%4 == 0 {
				out = append(out, f) // delivered twice
			}
		}
		edge := finding(fmt.Sprintf("edge%d", d), `x'); DROP TABLE findings; -- ?`, "<script>alert(1)</script>", "::1", day)
		last := finding(fmt.Sprintf("last%d", d), "alice", "kubectl/v1.20.0", "10.0.0.9", day.Add(24*time.Hour-time.Second))
		psp := finding(fmt.Sprintf("d%d-0", d), "alice", "kubectl/v1.20.0", "10.0.0.9", day.Add(time.Hour))
		psp.RuleId, psp.ApiGroup, psp.Resource, psp.RemovedIn = "psp", "policy", "podsecuritypolicies", "1.25"
		other := finding(fmt.Sprintf("d%d-0", d), "alice", "kubectl/v1.20.0", "10.0.0.9", day.Add(time.Hour))
		other.Cluster = "staging"
		out = append(out, edge, last, psp, other)
	}
	return out
}

type row struct {
	Day, Key    string
	Findings    uint64
	First, Last uint32
}

const keyText = `concat(rule_id, '|', toString(removed_in_key), '|', api_group, '|', api_version, '|', resource, '|', removed_in, '|',
  replacement, '|', username, '|', user_agent, '|', namespace, '|', source_ip)`

// fromDays reads the day rows of cluster ("" for every cluster) over [from, to) through
// rollup.Days.
func fromDays(t *testing.T, db *sql.DB, cluster string, from, to time.Time) []row {
	t.Helper()
	src, args, err := rollup.Days(context.Background(), db, rollup.TablesFor("findings"), rollup.Filter{Cluster: cluster, From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	// A key's day may come in two rows (a prefix and the later hours): summed per key.
	return rows(t, db, `SELECT toString(day) AS d, concat(cluster, '|', `+keyText+`) AS key, toUInt64(sum(findings)),
  toUInt32(min(first_seen)), toUInt32(max(last_seen))
FROM (`+src+`) GROUP BY d, key`, args...)
}

// fromView reads the same rows through the view rollup.View (Grafana's), of cluster ("" for
// every cluster) over the days [from, to).
func fromView(t *testing.T, db *sql.DB, cluster string, from, to time.Time) []row {
	t.Helper()
	return rows(t, db, `SELECT toString(day) AS d, concat(cluster, '|', `+keyText+`) AS key, toUInt64(sum(findings)),
  toUInt32(min(first_seen)), toUInt32(max(last_seen))
FROM `+rollup.View+` WHERE (? = '' OR cluster = ?) AND day >= toDate(?) AND day < toDate(?)
GROUP BY d, key`, cluster, cluster, rollup.Day(from), rollup.Day(to))
}

// byUser reads, through rollup.Days with only the columns username and last_seen, the
// findings of cluster per day, rule and user over [from, to).
func byUser(t *testing.T, db *sql.DB, cluster string, from, to time.Time) []row {
	t.Helper()
	src, args, err := rollup.Days(context.Background(), db, rollup.TablesFor("findings"),
		rollup.Filter{Cluster: cluster, From: from, To: to, Columns: []string{"username", "last_seen"}})
	if err != nil {
		t.Fatal(err)
	}
	return rows(t, db, `SELECT toString(day) AS d, concat(cluster, '|', rule_id, '|', username) AS key, toUInt64(sum(findings)),
  toUInt32(0), toUInt32(max(last_seen))
FROM (`+src+`) GROUP BY d, key`, args...)
}

// byUserFromFindings counts the same rows from the raw findings.
func byUserFromFindings(t *testing.T, db *sql.DB, cluster string, from, to time.Time) []row {
	t.Helper()
	return rows(t, db, `SELECT toString(toDate(event_time)) AS day, concat(cluster, '|', rule_id, '|', username) AS key,
  toUInt64(uniqExact(audit_id, request_received)), toUInt32(0), toUInt32(max(event_time))
FROM findings WHERE (? = '' OR cluster = ?) AND event_time >= toDateTime(?) AND event_time < toDateTime(?)
GROUP BY day, key`, cluster, cluster, from.Unix(), to.Unix())
}

// byHashes reads, through rollup.Days with only the hash columns and first_seen, the
// findings of cluster per day, blocker and caller over [from, to).
func byHashes(t *testing.T, db *sql.DB, cluster string, from, to time.Time) []row {
	t.Helper()
	src, args, err := rollup.Days(context.Background(), db, rollup.TablesFor("findings"),
		rollup.Filter{Cluster: cluster, From: from, To: to, Columns: []string{"blocker", "caller", "first_seen"}})
	if err != nil {
		t.Fatal(err)
	}
	return rows(t, db, `SELECT toString(day) AS d, concat(cluster, '|', toString(blocker), '|', toString(caller)) AS key,
  toUInt64(sum(findings)), toUInt32(min(first_seen)), toUInt32(0)
FROM (`+src+`) GROUP BY d, key`, args...)
}

// byHashesFromFindings counts the same rows from the raw findings.
func byHashesFromFindings(t *testing.T, db *sql.DB, cluster string, from, to time.Time) []row {
	t.Helper()
	return rows(t, db, `SELECT toString(toDate(event_time)) AS day,
  concat(cluster, '|', toString(`+rollup.BlockerHash+`), '|', toString(`+rollup.CallerHash+`)) AS key,
  toUInt64(uniqExact(rule_id, audit_id, request_received)), toUInt32(min(event_time)), toUInt32(0)
FROM findings WHERE (? = '' OR cluster = ?) AND event_time >= toDateTime(?) AND event_time < toDateTime(?)
GROUP BY day, key`, cluster, cluster, from.Unix(), to.Unix())
}

// fromFindings counts the same rows from the raw findings.
func fromFindings(t *testing.T, db *sql.DB, cluster string, from, to time.Time) []row {
	t.Helper()
	return rows(t, db, `SELECT toString(toDate(event_time)) AS day, concat(cluster, '|', `+keyText+`) AS key,
  toUInt64(uniqExact(audit_id, request_received)), toUInt32(min(event_time)), toUInt32(max(event_time))
FROM findings WHERE (? = '' OR cluster = ?) AND event_time >= toDateTime(?) AND event_time < toDateTime(?)
GROUP BY day, key`, cluster, cluster, from.Unix(), to.Unix())
}

func rows(t *testing.T, db *sql.DB, q string, args ...any) []row {
	t.Helper()
	rs, err := db.QueryContext(context.Background(), q, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, q)
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var r row
		if err := rs.Scan(&r.Day, &r.Key, &r.Findings, &r.First, &r.Last); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Day+out[i].Key < out[j].Day+out[j].Key })
	return out
}

func sameRows(t *testing.T, when string, got, want []row) {
	t.Helper()
	if len(want) == 0 {
		t.Fatalf("%s: no rows to compare", when)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: day rows differ from the raw findings:\n got %v\nwant %v", when, got, want)
	}
}

// The day rows count what a uniqExact over the raw findings counts, day by day and caller by
// caller, whether a day is read from the states (before compaction, after a late finding),
// from its build, or (today) from the prefix of its hours that are over and the states of
// the later hours; a late finding, and a late copy of a counted one, make a built day or
// prefix current again only after its next build.
func TestDaysAgreeWithTheFindings(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) { daysAgree(t, st, func() {}) })
}

// The same on a cluster (2 shards x 2 replicas): the Distributed state, hour and build
// tables answer as on one server.
func TestDaysAgreeWithTheFindingsOnCluster(t *testing.T) {
	c := chtest.StartCluster(t, 2, 2)
	st := c.Store(t, "auditlens")
	daysAgree(t, st, func() { c.WaitReplicated(t, "auditlens") })
}

// daysAgree runs the test on st; replicated waits until what was written is on every
// replica.
func daysAgree(t *testing.T, st *store.Store, replicated func()) {
	defer rollup.SetMargin(0)()
	today := testkit.Now().UTC().Truncate(24 * time.Hour)
	noon := today.Add(12 * time.Hour)
	defer rollup.SetNow(noon)()
	ctx := context.Background()
	db := st.DB()
	tables := rollup.TablesFor("findings")
	from, to := today.AddDate(0, 0, -5), today.AddDate(0, 0, 1)
	fs := seed(today)
	if err := st.WriteFindings(ctx, fs[:len(fs)/2]); err != nil {
		t.Fatal(err)
	}
	replicated()
	if err := st.WriteFindings(ctx, fs[len(fs)/2:]); err != nil {
		t.Fatal(err)
	}
	writeMoves(t, st, today)
	replicated()
	for _, c := range []string{"prod", "staging"} {
		movesAgree(t, db, today, c, c+", before compaction", from, to)
	}
	for _, c := range []string{"prod", "staging", ""} {
		sameRows(t, c+", before compaction", fromDays(t, db, c, from, to), fromFindings(t, db, c, from, to))
		sameRows(t, c+", the view, before compaction", fromView(t, db, c, from, to), fromFindings(t, db, c, from, to))
		sameRows(t, c+", some columns, before compaction", byUser(t, db, c, from, to), byUserFromFindings(t, db, c, from, to))
		sameRows(t, c+", hashes, before compaction", byHashes(t, db, c, from, to), byHashesFromFindings(t, db, c, from, to))
	}
	if _, _, err := rollup.Days(ctx, db, tables, rollup.Filter{From: from, To: to, Columns: []string{"audit_id"}}); err == nil {
		t.Error("Days gave a column the day rows do not have")
	}
	clean := func() []string {
		t.Helper()
		days, err := rollup.CleanDays(ctx, db, tables, "prod", from, to)
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(days)
		return days
	}
	if c := clean(); len(c) != 0 {
		t.Fatalf("days %v read from builds before any build", c)
	}

	time.Sleep(1100 * time.Millisecond) // a build in the second of a change is not current
	n, err := rollup.Compact(ctx, db, tables)
	if err != nil {
		t.Fatal(err)
	}
	replicated()
	if n != (rollup.Built{Days: 10, Prefixes: 2}) {
		t.Errorf("compacted %+v, want 10 cluster days (5 past days of 2 clusters; today is not over) and 2 prefixes (today's hours before noon)", n)
	}
	var past []string
	for d := 5; d >= 1; d-- {
		past = append(past, rollup.Day(today.AddDate(0, 0, -d))+" prod")
	}
	if c := clean(); !reflect.DeepEqual(c, past) {
		t.Errorf("days read from builds %v, want the past days %v", c, past)
	}
	prefixed := func() []string {
		t.Helper()
		days, err := rollup.PrefixedDays(ctx, db, tables, "", from, to)
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(days)
		return days
	}
	todays := []string{rollup.Day(today) + " prod", rollup.Day(today) + " staging"}
	if c := prefixed(); !reflect.DeepEqual(c, todays) {
		t.Errorf("days read from a prefix %v, want today's %v", c, todays)
	}
	for _, c := range []string{"prod", "staging", ""} {
		sameRows(t, c+", after compaction", fromDays(t, db, c, from, to), fromFindings(t, db, c, from, to))
		sameRows(t, c+", the view, after compaction", fromView(t, db, c, from, to), fromFindings(t, db, c, from, to))
		sameRows(t, c+", some columns, after compaction", byUser(t, db, c, from, to), byUserFromFindings(t, db, c, from, to))
		sameRows(t, c+", hashes, after compaction", byHashes(t, db, c, from, to), byHashesFromFindings(t, db, c, from, to))
	}
	movesAgree(t, db, today, "prod", "after compaction", from, to)
	// The hash columns, written at insert by their defaults (the rows) and by the view (the
	// states), hold what the readers' hashes say.
	for _, table := range []string{"finding_rows", "finding_hour_states"} {
		var wrong uint64
		if err := db.QueryRowContext(ctx, `SELECT count() FROM `+table+` WHERE blocker != `+rollup.BlockerHash+` OR caller != `+rollup.CallerHash).Scan(&wrong); err != nil || wrong != 0 {
			t.Errorf("%d rows of %s whose hash columns differ from rollup.BlockerHash or rollup.CallerHash (%v)", wrong, table, err)
		}
	}
	// The compaction kept the names of every hash of the hours it built; NamesOf reads them.
	namesKept(t, db, noon)
	namesAgree(t, db, "prod", from, to)
	if n, err := rollup.Compact(ctx, db, tables); err != nil || n != (rollup.Built{}) {
		t.Errorf("a second compaction built %+v (%v), want nothing", n, err)
	}
	replicated()

	// Today: a finding in an hour after noon leaves the prefix current; one before noon, and
	// another copy of a counted one, make it stale until the next compaction.
	if err := st.WriteFindings(ctx, []*auditlensv1.Finding{finding("after-noon", "bob", "helm/3.2", "10.0.0.7", noon.Add(90*time.Minute))}); err != nil {
		t.Fatal(err)
	}
	replicated()
	if c := prefixed(); !reflect.DeepEqual(c, todays) {
		t.Errorf("days read from a prefix after a finding past it %v, want %v", c, todays)
	}
	sameRows(t, "after a finding past the prefix", fromDays(t, db, "prod", from, to), fromFindings(t, db, "prod", from, to))
	// bob's name is in no name table yet (his hour is not built): NamesOf takes it from the
	// states.
	namesAgree(t, db, "prod", from, to)
	time.Sleep(1100 * time.Millisecond)
	if err := st.WriteFindings(ctx, []*auditlensv1.Finding{
		finding("before-noon", "bob", "helm/3.2", "10.0.0.7", today.Add(2*time.Hour)), fs[len(fs)-4],
	}); err != nil {
		t.Fatal(err)
	}
	replicated()
	if c := prefixed(); !reflect.DeepEqual(c, todays[1:]) {
		t.Errorf("days read from a prefix after a finding in it %v, want %v", c, todays[1:])
	}
	sameRows(t, "after a finding in the prefix", fromDays(t, db, "prod", from, to), fromFindings(t, db, "prod", from, to))
	sameRows(t, "hashes after a finding in the prefix", byHashes(t, db, "", from, to), byHashesFromFindings(t, db, "", from, to))
	time.Sleep(1100 * time.Millisecond)
	if n, err := rollup.Compact(ctx, db, tables); err != nil || n != (rollup.Built{Prefixes: 1}) {
		t.Errorf("compaction after a finding in the prefix built %+v (%v), want its prefix", n, err)
	}
	replicated()
	if c := prefixed(); !reflect.DeepEqual(c, todays) {
		t.Errorf("days read from a prefix after rebuilding it %v, want %v", c, todays)
	}
	sameRows(t, "after rebuilding the prefix", fromDays(t, db, "", from, to), fromFindings(t, db, "", from, to))
	movesAgree(t, db, today, "prod", "after rebuilding the prefix", from, to)

	// Late: a new finding three days ago, and another copy of one already counted.
	late := today.AddDate(0, 0, -3)
	if err := st.WriteFindings(ctx, []*auditlensv1.Finding{
		finding("late-1", "bob", "helm/3.2", "10.0.0.7", late.Add(5*time.Hour)),
		fs[0],
	}); err != nil {
		t.Fatal(err)
	}
	replicated()
	want := fromFindings(t, db, "prod", from, to)
	sameRows(t, "after a late finding", fromDays(t, db, "prod", from, to), want)
	sameRows(t, "the view after a late finding", fromView(t, db, "prod", from, to), want)
	sameRows(t, "hashes after a late finding", byHashes(t, db, "prod", from, to), byHashesFromFindings(t, db, "prod", from, to))
	for _, d := range clean() {
		if d == rollup.Day(late)+" prod" || d == rollup.Day(fs[0].EventTime.AsTime())+" prod" {
			t.Errorf("day %s read from its build after it changed", d)
		}
	}
	time.Sleep(1100 * time.Millisecond)
	if n, err := rollup.Compact(ctx, db, tables); err != nil || n != (rollup.Built{Days: 2}) {
		t.Errorf("compaction after the late findings built %+v (%v), want the 2 days changed", n, err)
	}
	replicated()
	if c := clean(); !reflect.DeepEqual(c, past) {
		t.Errorf("days read from builds %v, want the past days %v", c, past)
	}
	sameRows(t, "after rebuilding", fromDays(t, db, "prod", from, to), want)
	sameRows(t, "every cluster after rebuilding", fromDays(t, db, "", from, to), fromFindings(t, db, "", from, to))
	sameRows(t, "some columns after rebuilding", byUser(t, db, "", from, to), byUserFromFindings(t, db, "", from, to))
	sameRows(t, "hashes after rebuilding", byHashes(t, db, "", from, to), byHashesFromFindings(t, db, "", from, to))

	// The two days rebuilt left their first builds behind: once replaced CleanAfter ago they
	// are removed, rows and records, and every count stays.
	builds := func() (records, withRows uint64) {
		t.Helper()
		if err := db.QueryRowContext(ctx, `SELECT (SELECT uniqExact(build) FROM finding_builds), (SELECT uniqExact(build) FROM finding_rows)`).Scan(&records, &withRows); err != nil {
			t.Fatal(err)
		}
		return records, withRows
	}
	records, withRows := builds()
	if n, err := rollup.Clean(ctx, db, tables, st.DeleteBuilds); err != nil || n != 0 {
		t.Errorf("clean before CleanAfter removed %d builds (%v), want none", n, err)
	}
	restoreClean := rollup.SetCleanAfter(0)
	time.Sleep(1100 * time.Millisecond) // the newest builds a second in the past
	if removed, err := rollup.Clean(ctx, db, tables, st.DeleteBuilds); err != nil || removed != 2 {
		t.Errorf("clean removed %d builds (%v), want the 2 replaced", removed, err)
	}
	replicated()
	if r, w := builds(); r != records-2 || w != withRows-2 {
		t.Errorf("after clean: %d builds recorded, %d with rows; want %d and %d", r, w, records-2, withRows-2)
	}
	if n, err := rollup.Clean(ctx, db, tables, st.DeleteBuilds); err != nil || n != 0 {
		t.Errorf("a second clean removed %d builds (%v), want none", n, err)
	}
	restoreClean()
	sameRows(t, "after clean", fromDays(t, db, "", from, to), fromFindings(t, db, "", from, to))
	sameRows(t, "the view after clean", fromView(t, db, "", from, to), fromFindings(t, db, "", from, to))
	if c := clean(); !reflect.DeepEqual(c, past) {
		t.Errorf("days read from builds after clean %v, want the past days %v", c, past)
	}

	// The view reads a day from its newest build once that build began a minute (rollup.Margin)
	// after the day's last change: the builds, recorded again an hour later as if built then,
	// are read, one build a day (the rebuilt days have two).
	if _, err := db.ExecContext(ctx, `INSERT INTO finding_builds (cluster, day, until, built, build)
SELECT cluster, day, any(until), toUInt32(max(built) + 3600), argMax(build, built) FROM finding_builds WHERE `+rollup.Whole+` GROUP BY cluster, day`); err != nil {
		t.Fatal(err)
	}
	replicated()
	var fromBuilds uint64
	if err := db.QueryRowContext(ctx, `SELECT count() FROM finding_rows WHERE (cluster, day, build) GLOBAL IN (
  SELECT cluster, day, argMax(build, built) FROM finding_builds WHERE day < toDate(?) AND `+rollup.Whole+` GROUP BY cluster, day)`, rollup.Day(today)).Scan(&fromBuilds); err != nil || fromBuilds == 0 {
		t.Fatalf("no row in the newest builds of the past days: %d, %v", fromBuilds, err)
	}
	// A state written past the findings (never by the view on them) shows whether the view
	// reads a built day from its build: it must not count it.
	ghost := today.AddDate(0, 0, -2).Add(7 * time.Hour)
	if _, err := db.ExecContext(ctx, `INSERT INTO finding_hour_states (cluster, hour, blocker, caller, `+rollup.Key+`, message, findings, first_seen, last_seen)
SELECT 'prod', toDateTime(?, 'UTC'), 1, 2, 'removed-api', toUInt32(0), '', '', '', '', '', 'ghost', '', '', '',
  anyState(''), uniqExactState('ghost'), minState(toDateTime(?, 'UTC')), maxState(toDateTime(?, 'UTC'))`,
		ghost.Unix(), ghost.Unix(), ghost.Unix()); err != nil {
		t.Fatal(err)
	}
	replicated()
	sameRows(t, "the view of days built", fromView(t, db, "", from, to), fromFindings(t, db, "", from, to))
	sameRows(t, "days built", fromDays(t, db, "", from, to), fromFindings(t, db, "", from, to))

	// A window of a day and its neighbours only.
	mid, next := today.AddDate(0, 0, -2), today.AddDate(0, 0, -1)
	sameRows(t, "one day", fromDays(t, db, "prod", mid, next), fromFindings(t, db, "prod", mid, next))

	// A day 40 days ago, compacted while it was under way (a prefix), is read from its prefix.
	old := today.AddDate(0, 0, -40)
	if err := st.WriteFindings(ctx, []*auditlensv1.Finding{finding("old", "carol", "kubectl/v1.19.0", "10.0.0.8", old.Add(3*time.Hour))}); err != nil {
		t.Fatal(err)
	}
	replicated()
	time.Sleep(1100 * time.Millisecond)
	restore := rollup.SetNow(old.Add(13 * time.Hour))
	n, err = rollup.Compact(ctx, db, tables)
	restore()
	if err != nil || n != (rollup.Built{Prefixes: 1}) {
		t.Fatalf("compaction 40 days ago built %+v (%v), want that day's prefix", n, err)
	}
	replicated()
	if c, err := rollup.PrefixedDays(ctx, db, tables, "prod", old, old.AddDate(0, 0, 1)); err != nil || len(c) != 1 {
		t.Fatalf("the day 40 days ago is not read from its prefix: %v (%v)", c, err)
	}
	// Built whole once over (a day later by the compaction's clock), the day's prefix is
	// replaced: Clean removes it, rows and record, once the whole build is CleanAfter old.
	time.Sleep(1100 * time.Millisecond)
	restore = rollup.SetNow(old.AddDate(0, 0, 1).Add(time.Hour))
	n, err = rollup.Compact(ctx, db, tables)
	restore()
	if err != nil || n != (rollup.Built{Days: 1}) {
		t.Fatalf("compaction 39 days ago built %+v (%v), want the day 40 days ago whole", n, err)
	}
	replicated()
	oldBuilds := func() (records, withRows uint64) {
		t.Helper()
		if err := db.QueryRowContext(ctx, `SELECT (SELECT uniqExact(build) FROM finding_builds WHERE day = toDate(?)),
  (SELECT uniqExact(build) FROM finding_rows WHERE day = toDate(?))`, rollup.Day(old), rollup.Day(old)).Scan(&records, &withRows); err != nil {
			t.Fatal(err)
		}
		return records, withRows
	}
	if r, w := oldBuilds(); r != 2 || w != 2 {
		t.Errorf("the day 40 days ago has %d builds recorded, %d with rows; want its prefix and its whole build", r, w)
	}
	restoreClean = rollup.SetCleanAfter(0)
	time.Sleep(1100 * time.Millisecond)
	if removed, err := rollup.Clean(ctx, db, tables, st.DeleteBuilds); err != nil || removed != 1 {
		t.Errorf("clean removed %d builds (%v), want the prefix of the day 40 days ago", removed, err)
	}
	restoreClean()
	replicated()
	if r, w := oldBuilds(); r != 1 || w != 1 {
		t.Errorf("after clean the day 40 days ago has %d builds recorded, %d with rows; want its whole build", r, w)
	}
	if c, err := rollup.CleanDays(ctx, db, tables, "prod", old, old.AddDate(0, 0, 1)); err != nil || len(c) != 1 {
		t.Errorf("the day 40 days ago is not read from its build: %v (%v)", c, err)
	}
	if c := prefixed(); !reflect.DeepEqual(c, todays) {
		t.Errorf("days read from a prefix after clean %v, want today's %v", c, todays)
	}
	sameRows(t, "after the old day's clean", fromDays(t, db, "", from, to), fromFindings(t, db, "", from, to))
	sameRows(t, "the view after the old day's clean", fromView(t, db, "", from, to), fromFindings(t, db, "", from, to))
	// The raw findings of 40 days ago may be gone already (a retention of 30 days).
	if got := byUser(t, db, "prod", old, old.AddDate(0, 0, 1)); len(got) != 1 || got[0].Findings != 1 {
		t.Errorf("the day 40 days ago after clean: %v, want carol's one finding", got)
	}
}

func TestSpanCoversWholeDays(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct{ start, end, from, to string }{
		{"2026-11-02T10:00:00Z", "2026-11-09T10:00:00Z", "2026-11-02T00:00:00Z", "2026-11-10T00:00:00Z"},
		{"2026-11-02T00:00:00Z", "2026-11-09T00:00:00Z", "2026-11-02T00:00:00Z", "2026-11-09T00:00:00Z"},
		{"2026-11-02T23:59:59+02:00", "2026-11-03T00:00:01Z", "2026-11-02T00:00:00Z", "2026-11-04T00:00:00Z"},
	} {
		from, to := rollup.Span(at(c.start), at(c.end))
		if !from.Equal(at(c.from)) || !to.Equal(at(c.to)) {
			t.Errorf("Span(%s, %s) = %s, %s; want %s, %s", c.start, c.end, from, to, c.from, c.to)
		}
	}
}

// Migrations 6 and 7 fill the day rows and today's hours from the findings stored before
// them: on a store at version 5 with findings, migrating gives the same counts as the raw
// findings, before and after compaction (today from its prefix then), and the requests
// index lists each finding.
func TestMigrationFillsTheDaysFromStoredFindings(t *testing.T) {
	defer rollup.SetMargin(0)()
	defer rollup.SetNow(testkit.Now().UTC().Truncate(24 * time.Hour).Add(12 * time.Hour))()
	all, before, after := cutMigrations(t, 6)
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		ctx := context.Background()
		db := st.DB()
		today := testkit.Now().UTC().Truncate(24 * time.Hour)
		from, to := today.AddDate(0, 0, -5), today.AddDate(0, 0, 1)
		if err := writeOld(ctx, st, seed(today)); err != nil {
			t.Fatal(err)
		}
		store.Migrations = all
		did, err := st.Migrate(ctx, store.MigrateOptions{RetentionDays: 30})
		store.Migrations = before
		if err != nil || !reflect.DeepEqual(did, after) || after[0] != 6 || after[1] != 7 {
			t.Fatalf("migrate applied %v (%v), want %v", did, err, after)
		}
		for _, c := range []string{"prod", "staging", ""} {
			sameRows(t, c+", after the migration", fromDays(t, db, c, from, to), fromFindings(t, db, c, from, to))
		}
		time.Sleep(1100 * time.Millisecond)
		if n, err := rollup.Compact(ctx, db, rollup.TablesFor("findings")); err != nil || n.Prefixes != 2 {
			t.Fatalf("compaction after the migration built %+v (%v), want today's 2 prefixes", n, err)
		}
		for _, c := range []string{"prod", "staging", ""} {
			sameRows(t, c+", compacted after the migration", fromDays(t, db, c, from, to), fromFindings(t, db, c, from, to))
		}
		var indexed, stored uint64
		if err := db.QueryRowContext(ctx, `SELECT
  (SELECT uniqExact(cluster, rule_id, audit_id) FROM finding_requests),
  (SELECT uniqExact(cluster, rule_id, audit_id) FROM findings)`).Scan(&indexed, &stored); err != nil {
			t.Fatal(err)
		}
		if indexed != stored || stored == 0 {
			t.Errorf("finding_requests holds %d findings, findings %d", indexed, stored)
		}
	})
}

// Migration 13 retires the approximate daily rollups and adds the view: on a store at
// version 12 with findings, the day rows and the view read what the raw findings count after
// it (and the later steps), as many findings as migration 2's daily_rules counted, and
// migration 2's tables and views are gone.
func TestMigrationToTheViewKeepsTheCounts(t *testing.T) {
	all, before, after := cutMigrations(t, 13)
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		ctx := context.Background()
		db := st.DB()
		today := testkit.Now().UTC().Truncate(24 * time.Hour)
		from, to := today.AddDate(0, 0, -5), today.AddDate(0, 0, 1)
		if err := writeOld(ctx, st, seed(today)); err != nil {
			t.Fatal(err)
		}
		var daily uint64
		if err := db.QueryRowContext(ctx, `SELECT toUInt64(sum(n)) FROM (SELECT uniqMerge(findings) AS n FROM daily_rules GROUP BY cluster, rule_id, day)`).Scan(&daily); err != nil || daily == 0 {
			t.Fatalf("daily_rules before the migration: %d, %v", daily, err)
		}
		store.Migrations = all
		did, err := st.Migrate(ctx, store.MigrateOptions{})
		store.Migrations = before
		if err != nil || !slices.Equal(did, after) || after[0] != 13 {
			t.Fatalf("migrate applied %v (%v), want %v", did, err, after)
		}
		sameRows(t, "the day rows after the migration", fromDays(t, db, "", from, to), fromFindings(t, db, "", from, to))
		sameRows(t, "the view after the migration", fromView(t, db, "", from, to), fromFindings(t, db, "", from, to))
		var total uint64
		if err := db.QueryRowContext(ctx, `SELECT toUInt64(sum(findings)) FROM `+rollup.View).Scan(&total); err != nil || total != daily {
			t.Errorf("the view counts %d findings (%v), migration 2's daily_rules counted %d", total, err, daily)
		}
		var left uint64
		if err := db.QueryRowContext(ctx, `SELECT count() FROM system.tables WHERE database = ? AND name LIKE 'daily\_%'`, st.Database()).Scan(&left); err != nil || left != 0 {
			t.Errorf("%d of migration 2's tables and views left (%v), want none", left, err)
		}
	})
}

// Migrations 15 to 17 make the hour states the only states, put every build in one table and
// add the hash columns: on a store at version 14 with whole builds of the past days and a
// prefix of today (written as the compaction before them wrote them), whose hours of an old
// month were pruned (as the pruning before them did) while the day's build stayed, the
// migrations fill those hours again from the findings, and the day rows, their hashes and the
// view count what the raw findings count, read from the states; the first compaction builds
// every day again (and today's prefix), and the counts stay; the day states, the four build
// tables and their views are gone.
func TestMigrationToHourStatesKeepsTheCounts(t *testing.T) {
	defer rollup.SetMargin(0)()
	all, before, after := cutMigrations(t, 15)
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		ctx := context.Background()
		db := st.DB()
		tables := rollup.TablesFor("findings")
		today := testkit.Now().UTC().Truncate(24 * time.Hour)
		noon := today.Add(12 * time.Hour)
		old := today.AddDate(0, 0, -40)
		from, to := old, today.AddDate(0, 0, 1)
		defer rollup.SetNow(noon)()
		found := append(seed(today), finding("old", "carol", "kubectl/v1.19.0", "10.0.0.8", old.Add(3*time.Hour)))
		if err := writeOld(ctx, st, found); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1100 * time.Millisecond)
		// The builds of the compaction of version 14: the past days whole, today's hours
		// before noon as a prefix.
		for _, q := range []struct {
			sql  string
			args []any
		}{{`
INSERT INTO finding_days (cluster, day, ` + rollup.Key + `, message, findings, first_seen, last_seen, build)
SELECT cluster, toDate(hour) AS day, ` + rollup.Key + `, anyMerge(message), uniqExactMerge(findings),
  toUInt32(minMerge(first_seen)), toUInt32(maxMerge(last_seen)), cityHash64(cluster, day)
FROM finding_hours_state WHERE hour < toDateTime(?) GROUP BY cluster, day, ` + rollup.Key, []any{today.Unix()}}, {`
INSERT INTO finding_day_builds (cluster, day, built, build)
SELECT DISTINCT cluster, day, toUInt32(now()), build FROM finding_days`, nil}, {`
INSERT INTO finding_day_prefixes (cluster, day, ` + rollup.Key + `, message, findings, first_seen, last_seen, build)
SELECT cluster, toDate(hour) AS day, ` + rollup.Key + `, anyMerge(message), uniqExactMerge(findings),
  toUInt32(minMerge(first_seen)), toUInt32(maxMerge(last_seen)), cityHash64(cluster, 'prefix')
FROM finding_hours_state WHERE hour >= toDateTime(?) AND hour < toDateTime(?) GROUP BY cluster, day, ` + rollup.Key, []any{today.Unix(), noon.Unix()}}, {`
INSERT INTO finding_day_prefix_builds (cluster, day, until, built, build)
SELECT DISTINCT cluster, day, toDateTime(?), toUInt32(now()), build FROM finding_day_prefixes`, []any{noon.Unix()}}} {
			if _, err := db.ExecContext(ctx, q.sql, q.args...); err != nil {
				t.Fatal(err)
			}
		}
		month := uint32(old.Year()*100 + int(old.Month()))
		for _, table := range []string{"finding_hours_state", tables.HourChanges} {
			if err := st.DropMonth(ctx, table, month); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(1100 * time.Millisecond)
		store.Migrations = all
		did, err := st.Migrate(ctx, store.MigrateOptions{})
		store.Migrations = before
		if err != nil || !slices.Equal(did, after) || after[0] != 15 {
			t.Fatalf("migrate applied %v (%v), want %v", did, err, after)
		}
		for _, c := range []string{"prod", "staging", ""} {
			sameRows(t, c+", after the migration", fromDays(t, db, c, from, to), fromFindings(t, db, c, from, to))
		}
		sameRows(t, "the view after the migration", fromView(t, db, "", from, to), fromFindings(t, db, "", from, to))
		sameRows(t, "hashes after the migration", byHashes(t, db, "", from, to), byHashesFromFindings(t, db, "", from, to))
		if built, err := rollup.CleanDays(ctx, db, tables, "", from, today); err != nil || len(built) != 0 {
			t.Errorf("days read from builds after the migration %v (%v), want none: the builds before it are gone", built, err)
		}
		time.Sleep(1100 * time.Millisecond)
		if n, err := rollup.Compact(ctx, db, tables); err != nil || n != (rollup.Built{Days: 11, Prefixes: 2}) {
			t.Errorf("compaction after the migration built %+v (%v), want the 11 past days (5 of each cluster and the old one) and today's 2 prefixes", n, err)
		}
		built, err := rollup.CleanDays(ctx, db, tables, "", from, today)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(built, rollup.Day(old)+" prod") || len(built) != 11 {
			t.Errorf("days read from their builds after the compaction %v, want the 11 past days, the old one too", built)
		}
		for _, c := range []string{"prod", "staging", ""} {
			sameRows(t, c+", compacted after the migration", fromDays(t, db, c, from, to), fromFindings(t, db, c, from, to))
		}
		sameRows(t, "hashes compacted after the migration", byHashes(t, db, "", from, to), byHashesFromFindings(t, db, "", from, to))
		var left []string
		if err := db.QueryRowContext(ctx, `SELECT groupArray(name) FROM system.tables WHERE database = ? AND (name LIKE 'finding\\_day%' OR name LIKE 'finding\\_days%')
  AND name != 'finding_days_current'`, st.Database()).Scan(&left); err != nil || len(left) != 0 {
			t.Errorf("tables and views left of the day states and the four build tables: %v (%v), want none", left, err)
		}
	})
}

// namesKept fails t unless blocker_names and caller_names hold the names of every blocker and
// caller hash of the findings before until, with the day each was last seen.
func namesKept(t *testing.T, db *sql.DB, until time.Time) {
	t.Helper()
	for _, q := range []struct{ what, sql string }{{"blockers", `
SELECT count() FROM (
  SELECT ` + rollup.BlockerHash + ` AS h, rule_id, api_group, api_version, resource, removed_in, replacement, max(toDate(event_time)) AS seen
  FROM findings WHERE event_time < toDateTime(?) GROUP BY h, rule_id, api_group, api_version, resource, removed_in, replacement)
WHERE (h, rule_id, api_group, api_version, resource, removed_in, replacement, seen) GLOBAL NOT IN (
  SELECT blocker, rule_id, api_group, api_version, resource, removed_in, replacement, seen FROM blocker_names)`}, {"callers", `
SELECT count() FROM (
  SELECT ` + rollup.CallerHash + ` AS h, username, user_agent, source_ip, max(toDate(event_time)) AS seen
  FROM findings WHERE event_time < toDateTime(?) GROUP BY h, username, user_agent, source_ip)
WHERE (h, username, user_agent, source_ip, seen) GLOBAL NOT IN (
  SELECT caller, username, user_agent, source_ip, seen FROM caller_names)`}} {
		var missing uint64
		if err := db.QueryRowContext(context.Background(), q.sql, until.Unix()).Scan(&missing); err != nil || missing != 0 {
			t.Errorf("%d %s of the findings before %s without their names and day in the name tables (%v)", missing, q.what, until.Format(time.DateTime), err)
		}
	}
}

// namesAgree fails t unless rollup.NamesOf names every blocker and caller hash of cluster's
// blocking findings over the days [from, to) as the findings do.
func namesAgree(t *testing.T, db *sql.DB, cluster string, from, to time.Time) {
	t.Helper()
	ctx := context.Background()
	want := rollup.Names{Blockers: map[uint64]rollup.BlockerName{}, Callers: map[uint64]rollup.CallerName{}}
	var blockers, callers []uint64
	err := rollup.Query(ctx, db, "names", `SELECT `+rollup.BlockerHash+` AS b, `+rollup.CallerHash+` AS c,
  rule_id, api_group, api_version, resource, removed_in, replacement, username, user_agent, source_ip
FROM findings WHERE cluster = ? AND event_time >= toDateTime(?) AND event_time < toDateTime(?)`, []any{cluster, from.Unix(), to.Unix()}, func(r rollup.Row) error {
		var b, c uint64
		var k rollup.BlockerName
		var who rollup.CallerName
		if err := r.Scan(&b, &c, &k.RuleID, &k.APIGroup, &k.APIVersion, &k.Resource, &k.RemovedIn, &k.Replacement, &who.Username, &who.UserAgent, &who.SourceIP); err != nil {
			return err
		}
		if _, ok := want.Blockers[b]; !ok {
			blockers = append(blockers, b)
		}
		if _, ok := want.Callers[c]; !ok {
			callers = append(callers, c)
		}
		want.Blockers[b], want.Callers[c] = k, who
		return nil
	})
	if err != nil || len(blockers) == 0 {
		t.Fatalf("%d blockers in the findings of %s (%v)", len(blockers), cluster, err)
	}
	got, err := rollup.NamesOf(ctx, db, rollup.TablesFor("findings"), cluster, nil, from, to, 1038, blockers, callers)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("names of %s's hashes:\n got %+v\nwant %+v", cluster, got, want)
	}
}

// Migrations 18 and 19 put the hashes in the hour states and keep the names behind them: on a
// store at version 17 with findings, the day rows, their hashes and the view count what the
// raw findings count after them, the name tables name every hash, the old states and their
// view are gone; findings written after them (a late copy of a counted one, a new one) and
// the compaction keep the counts.
func TestMigrationToHashedStatesKeepsTheCounts(t *testing.T) {
	defer rollup.SetMargin(0)()
	all, before, after := cutMigrations(t, 18)
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		ctx := context.Background()
		db := st.DB()
		today, fs := seedOld(ctx, t, st)
		from, to := today.AddDate(0, 0, -5), today.AddDate(0, 0, 1)
		migrateRest(ctx, t, st, all, before, after)
		for _, c := range []string{"prod", "staging", ""} {
			sameRows(t, c+", after the migration", fromDays(t, db, c, from, to), fromFindings(t, db, c, from, to))
		}
		sameRows(t, "the view after the migration", fromView(t, db, "", from, to), fromFindings(t, db, "", from, to))
		sameRows(t, "hashes after the migration", byHashes(t, db, "", from, to), byHashesFromFindings(t, db, "", from, to))
		namesKept(t, db, to)
		var left []string
		if err := db.QueryRowContext(ctx, `SELECT groupArray(name) FROM system.tables WHERE database = ? AND name LIKE 'finding\\_hours\\_state%'`, st.Database()).Scan(&left); err != nil || len(left) != 0 {
			t.Errorf("the old hour states left: %v (%v), want none", left, err)
		}
		late := finding("late", "dave", "kubectl/v1.21.0", "10.0.0.10", today.AddDate(0, 0, -2).Add(5*time.Hour))
		if err := st.WriteFindings(ctx, []*auditlensv1.Finding{fs[0], late}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1100 * time.Millisecond)
		if n, err := rollup.Compact(ctx, db, rollup.TablesFor("findings")); err != nil || n != (rollup.Built{Days: 10, Prefixes: 2}) {
			t.Errorf("compaction after the migration built %+v (%v), want the 10 past days and today's 2 prefixes", n, err)
		}
		for _, c := range []string{"prod", "staging", ""} {
			sameRows(t, c+", compacted after the migration", fromDays(t, db, c, from, to), fromFindings(t, db, c, from, to))
		}
		sameRows(t, "hashes compacted after the migration", byHashes(t, db, "", from, to), byHashesFromFindings(t, db, "", from, to))
		namesKept(t, db, to)
		namesAgree(t, db, "prod", from, to)
	})
}

// A client may send its own Audit-ID and the kube-apiserver keeps it: two requests with one
// audit ID (the same rule, past classify's de-duplication window) are two findings, in the raw
// table after its replacing merges, in the hour states and in the builds, while a finding
// delivered again, and a sighting (no request time: one per caller and day) seen again later,
// stay one.
func TestReusedAuditIDIsTwoFindings(t *testing.T) {
	defer rollup.SetMargin(0)()
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		ctx := context.Background()
		db := st.DB()
		today := testkit.Now().UTC().Truncate(24 * time.Hour)
		from, to := today.AddDate(0, 0, -1), today.AddDate(0, 0, 1)
		defer rollup.SetNow(today.Add(12 * time.Hour))()
		request := func(id, user string, at time.Time) *auditlensv1.Finding {
			f := finding(id, user, "kubectl/v1.20.0", "10.0.0.9", at)
			f.RequestReceived = at.Unix()
			return f
		}
		alice := request("reused", "alice", today.Add(time.Hour))
		bob := request("reused", "bob", today.Add(5*time.Hour))
		carol1 := request("reused-within-the-hour", "carol", today.Add(2*time.Hour))
		carol2 := request("reused-within-the-hour", "carol", today.Add(2*time.Hour+30*time.Minute))
		seen := finding("sighting-kubelet", "system:node:n1", "kubelet/v1.30.0", "10.0.0.2", today.Add(3*time.Hour))
		seenLater := finding("sighting-kubelet", "system:node:n1", "kubelet/v1.30.0", "10.0.0.2", today.Add(3*time.Hour+20*time.Minute))
		for _, batch := range [][]*auditlensv1.Finding{{alice, bob, carol1, seen}, {carol2, alice, seenLater}, {bob, carol1}} {
			if err := st.WriteFindings(ctx, batch); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := db.ExecContext(ctx, "OPTIMIZE TABLE findings FINAL"); err != nil {
			t.Fatal(err)
		}
		var stored, kept uint64
		if err := db.QueryRowContext(ctx, `SELECT countIf(audit_id LIKE 'reused%'), countIf(audit_id = 'sighting-kubelet') FROM findings FINAL`).Scan(&stored, &kept); err != nil {
			t.Fatal(err)
		}
		if stored != 4 || kept != 1 {
			t.Errorf("after the merges findings holds %d requests of the reused audit IDs (want 4) and %d sightings (want 1)", stored, kept)
		}
		// (The sighting's first time is not compared with the raw table's: a replacing merge
		// keeps one of its two copies, the hour states the first time of both.)
		want := map[string]uint64{"alice": 1, "bob": 1, "carol": 2, "system:node:n1": 1}
		perUser := func(rs []row, field int) map[string]uint64 {
			got := map[string]uint64{}
			for _, r := range rs {
				got[strings.Split(r.Key, "|")[field]] += r.Findings
			}
			return got
		}
		check := func(when string) {
			t.Helper()
			for _, c := range []struct {
				from string
				got  map[string]uint64
			}{
				{"rollup.Days", perUser(byUser(t, db, "prod", from, to), 2)},
				{"the view", perUser(fromView(t, db, "prod", from, to), 8)},
				{"the raw findings", perUser(byUserFromFindings(t, db, "prod", from, to), 2)},
			} {
				if !reflect.DeepEqual(c.got, want) {
					t.Errorf("%s: findings by user through %s %v, want %v", when, c.from, c.got, want)
				}
			}
		}
		check("from the hour states")
		time.Sleep(1100 * time.Millisecond)
		if _, err := rollup.Compact(ctx, db, rollup.TablesFor("findings")); err != nil {
			t.Fatal(err)
		}
		check("compacted")
	})
}

// Migration 20 adds the request time to a finding's identity: on a store at version 19 with
// findings, the day rows and the view read what the raw findings count after it, the findings
// stored before keep their identity (a second delivery adds nothing), and two requests sharing
// an audit ID written after it are two findings.
func TestMigrationToRequestIdentityKeepsTheCounts(t *testing.T) {
	defer rollup.SetMargin(0)()
	all, before, after := cutMigrations(t, 20)
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		ctx := context.Background()
		db := st.DB()
		today, fs := seedOld(ctx, t, st)
		from, to := today.AddDate(0, 0, -5), today.AddDate(0, 0, 1)
		wantDays := fromDays(t, db, "", from, to)
		migrateRest(ctx, t, st, all, before, after)
		sameRows(t, "after the migration", fromDays(t, db, "", from, to), wantDays)
		sameRows(t, "the raw findings after the migration", fromFindings(t, db, "", from, to), wantDays)
		sameRows(t, "the view after the migration", fromView(t, db, "", from, to), wantDays)
		var views []string
		if err := db.QueryRowContext(ctx, `SELECT groupArray(name) FROM system.tables WHERE database = ? AND name LIKE 'finding\\_hour\\_states%\\_mv'`, st.Database()).Scan(&views); err != nil || !slices.Equal(views, []string{"finding_hour_states_by_request_mv"}) {
			t.Errorf("the hour states' views: %v (%v), want only finding_hour_states_by_request_mv", views, err)
		}
		// A finding stored before, delivered again by a report of the version before (no
		// request time), adds nothing; two requests sharing an audit ID are two.
		again := fs[0]
		reused := finding(again.AuditId, "erin", "kubectl/v1.21.0", "10.0.0.11", today.Add(7*time.Hour))
		reused.RequestReceived = today.Add(7 * time.Hour).Unix()
		if err := st.WriteFindings(ctx, []*auditlensv1.Finding{again, reused}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1100 * time.Millisecond)
		if _, err := rollup.Compact(ctx, db, rollup.TablesFor("findings")); err != nil {
			t.Fatal(err)
		}
		sameRows(t, "compacted after the migration", fromDays(t, db, "", from, to), fromFindings(t, db, "", from, to))
		var total uint64
		if err := db.QueryRowContext(ctx, `SELECT uniqExact(cluster, rule_id, audit_id, request_received) FROM findings`).Scan(&total); err != nil {
			t.Fatal(err)
		}
		var before uint64
		for _, r := range wantDays {
			before += r.Findings
		}
		if total != before+1 {
			t.Errorf("%d findings after a redelivery and a reused audit ID, want %d", total, before+1)
		}
	})
}

// migrateRest applies to st the steps of all that before (cutMigrations) left out, and fails t
// unless it applied exactly those (after).
func migrateRest(ctx context.Context, t *testing.T, st *store.Store, all, before []store.Migration, after []int) {
	t.Helper()
	store.Migrations = all
	did, err := st.Migrate(ctx, store.MigrateOptions{})
	store.Migrations = before
	if err != nil || !slices.Equal(did, after) || len(after) == 0 || after[0] != before[len(before)-1].Version+1 {
		t.Fatalf("migrate applied %v (%v), want %v", did, err, after)
	}
}

// seedOld writes seed(today) into st, a store at a version before migration 20, with the
// rollup's clock at today's noon until t ends.
func seedOld(ctx context.Context, t *testing.T, st *store.Store) (today time.Time, fs []*auditlensv1.Finding) {
	t.Helper()
	today = testkit.Now().UTC().Truncate(24 * time.Hour)
	t.Cleanup(rollup.SetNow(today.Add(12 * time.Hour)))
	fs = seed(today)
	if err := writeOld(ctx, st, fs); err != nil {
		t.Fatal(err)
	}
	return today, fs
}

// writeOld writes fs into a store at a version before migration 20, whose findings have no
// request_received column.
func writeOld(ctx context.Context, st *store.Store, fs []*auditlensv1.Finding) error {
	cols := store.FindingColumns[:len(store.FindingColumns)-1]
	if store.FindingColumns[len(cols)] != "request_received" {
		return fmt.Errorf("the last finding column is %s, not request_received", store.FindingColumns[len(cols)])
	}
	var rows [][]any
	for _, f := range fs {
		rows = append(rows, store.FindingRow(f, testkit.Now())[:len(cols)])
	}
	return st.Insert(ctx, "findings", cols, rows)
}

// cutMigrations makes store.Migrations the steps before version until t ends (a store at the
// version before it), and returns every step, those before, and the versions from it on.
func cutMigrations(t *testing.T, version int) (all, before []store.Migration, after []int) {
	t.Helper()
	all = store.Migrations
	for _, m := range all {
		if m.Version < version {
			before = append(before, m)
		} else {
			after = append(after, m.Version)
		}
	}
	store.Migrations = before
	t.Cleanup(func() { store.Migrations = all })
	return all, before, after
}

// Migration 21 adds the move key to the build rows: the days built before it (their parts
// without the column, whose default is computed when read) and after it meet their callers'
// moves as the raw findings and the sightings say.
func TestMigrationToStoredMoveKeyKeepsTheMoves(t *testing.T) {
	defer rollup.SetMargin(0)()
	all, before, after := cutMigrations(t, 21)
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		ctx := context.Background()
		db := st.DB()
		today := testkit.Now().UTC().Truncate(24 * time.Hour)
		defer rollup.SetNow(today.Add(12 * time.Hour))()
		from, to := today.AddDate(0, 0, -5), today.AddDate(0, 0, 1)
		if err := st.WriteFindings(ctx, seed(today)); err != nil {
			t.Fatal(err)
		}
		writeMoves(t, st, today)
		time.Sleep(1100 * time.Millisecond)
		if _, err := rollup.Compact(ctx, db, rollup.TablesFor("findings")); err != nil {
			t.Fatal(err)
		}
		migrateRest(ctx, t, st, all, before, after)
		movesAgree(t, db, today, "prod", "built before the migration", from, to)
		late := finding("late", "dave", "kubectl/v1.21.0", "10.0.0.10", today.AddDate(0, 0, -2).Add(5*time.Hour))
		if err := st.WriteFindings(ctx, []*auditlensv1.Finding{late}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1100 * time.Millisecond)
		if n, err := rollup.Compact(ctx, db, rollup.TablesFor("findings")); err != nil || n.Days == 0 {
			t.Fatalf("compaction after the migration built %+v (%v), want the late finding's day", n, err)
		}
		movesAgree(t, db, today, "prod", "built before and after the migration", from, to)
		var stored uint64
		if err := db.QueryRowContext(ctx, `SELECT count() FROM finding_rows WHERE move_key != 0`).Scan(&stored); err != nil || stored == 0 {
			t.Errorf("build rows with a move key: %d (%v)", stored, err)
		}
	})
}

// The lookups over every day kept name no build: 50 clusters of 400 days built (a fleet at the
// default retention) are 20,000 current builds, whose ids alone would not fit in a query
// (ClickHouse's max_query_size, 256 KiB by default).
func TestLookupsFitAFleetOfBuilds(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		ctx := context.Background()
		db := st.DB()
		tables := rollup.TablesFor("findings")
		today := testkit.Now().UTC().Truncate(24 * time.Hour)
		var now uint32
		if err := db.QueryRowContext(ctx, `SELECT toUInt32(now())`).Scan(&now); err != nil {
			t.Fatal(err)
		}
		day := today.AddDate(0, 0, -1).Unix()
		for _, q := range []struct {
			sql  string
			args []any
		}{{`
INSERT INTO finding_hour_changes
SELECT concat('c', toString(number % 50)) AS cluster, toDateTime(?) - intDiv(number, 50) * 86400 AS hour, maxState(toUInt32(?)) AS changed
FROM numbers(20000) GROUP BY cluster, hour`, []any{day, now - 7200}}, {`
INSERT INTO finding_builds (cluster, day, until, built, build)
SELECT concat('c', toString(number % 50)), toDate(toDateTime(?) - intDiv(number, 50) * 86400), toDateTime(?) - intDiv(number, 50) * 86400 + 86400,
  toUInt32(?) + 3600, cityHash64(number) + 1
FROM numbers(20000)`, []any{day, day, now - 7200}}} {
			if _, err := db.ExecContext(ctx, q.sql, q.args...); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.WriteFindings(ctx, []*auditlensv1.Finding{finding("f1", "alice", "kubectl/v1.20.0", "10.0.0.9", today.Add(time.Hour))}); err != nil {
			t.Fatal(err)
		}
		newest, err := rollup.NewestOf(ctx, db, tables, 1038, 1000)
		if err != nil {
			t.Fatalf("the cluster list over 20,000 builds: %v", err)
		}
		if len(newest) != 1 || newest[0].Cluster != "prod" || newest[0].Blocker != uint32(today.Add(time.Hour).Unix()) {
			t.Errorf("the cluster list over 20,000 builds: %+v, want prod's finding", newest)
		}
		if _, err := rollup.NewestBlocker(ctx, db, tables, "c7", 1038); err != nil {
			t.Errorf("the newest blocker of a cluster of 400 builds: %v", err)
		}
	})
}

// The newest findings are looked for among the recent days first; what those lack comes from
// every day kept: a cluster whose newest blocker is older than a week, one that blocks only in
// an old day, one that never blocks, one whose clock runs a day ahead. Both lookups equal the
// raw findings' maxima, before and after the days are built.
func TestNewestLooksPastTheRecentDays(t *testing.T) {
	defer rollup.SetMargin(0)()
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		ctx := context.Background()
		db := st.DB()
		tables := rollup.TablesFor("findings")
		// The lookups choose the recent days by the server's clock: the findings are placed by it.
		today := chtest.ServerNow(t, db).Truncate(24 * time.Hour)
		at := func(cluster string, days int, removedIn string) *auditlensv1.Finding {
			f := finding(fmt.Sprintf("%s%d%s", cluster, days, removedIn), "alice", "kubectl/v1.20.0", "10.0.0.9", today.AddDate(0, 0, days).Add(time.Hour))
			f.Cluster, f.RemovedIn = cluster, removedIn
			return f
		}
		const target = 1022 // 1.22 blocks, 1.29 does not
		fs := []*auditlensv1.Finding{
			at("live", 0, "1.22"), at("live", -1, "1.29"), at("live", -20, "1.22"),
			at("lapsed", -12, "1.22"), at("lapsed", 0, "1.29"),
			at("old", -40, "1.22"), at("old", -30, "1.29"),
			at("clean", 0, "1.29"), at("clean", -50, "1.29"),
			at("ahead", 1, "1.22"), at("ahead", -9, "1.22"),
		}
		if err := st.WriteFindings(ctx, fs); err != nil {
			t.Fatal(err)
		}
		check := func(when string) {
			t.Helper()
			want := map[string]rollup.Newest{}
			err := rollup.Query(ctx, db, "raw", `SELECT toString(cluster), toUInt32(max(event_time)), toUInt32(maxIf(event_time, `+rollup.Blocking+`))
FROM findings GROUP BY cluster`, []any{target}, func(r rollup.Row) error {
				var n rollup.Newest
				if err := r.Scan(&n.Cluster, &n.Finding, &n.Blocker); err != nil {
					return err
				}
				want[n.Cluster] = n
				return nil
			})
			if err != nil || len(want) != 5 {
				t.Fatalf("%s: raw maxima %v (%v)", when, want, err)
			}
			got, err := rollup.NewestOf(ctx, db, tables, target, 100)
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			var names []string
			for _, n := range got {
				names = append(names, n.Cluster)
				if n != want[n.Cluster] {
					t.Errorf("%s: NewestOf %+v, want %+v", when, n, want[n.Cluster])
				}
				b, err := rollup.NewestBlocker(ctx, db, tables, n.Cluster, target)
				if err != nil || b != want[n.Cluster].Blocker {
					t.Errorf("%s: NewestBlocker(%s) = %d (%v), want %d", when, n.Cluster, b, err, want[n.Cluster].Blocker)
				}
			}
			if !slices.Equal(names, []string{"ahead", "clean", "lapsed", "live", "old"}) {
				t.Errorf("%s: clusters %v, want each by name", when, names)
			}
			if cut, err := rollup.NewestOf(ctx, db, tables, target, 2); err != nil || len(cut) != 2 || cut[0].Cluster != "ahead" || cut[1].Cluster != "clean" {
				t.Errorf("%s: the first 2 clusters %+v (%v), want ahead and clean", when, cut, err)
			}
		}
		check("from the hours' states")
		time.Sleep(1100 * time.Millisecond) // a build in the second of a change is not current
		if n, err := rollup.Compact(ctx, db, tables); err != nil || n.Days == 0 {
			t.Fatalf("compaction built %+v (%v), want the past days", n, err)
		}
		check("from the builds")
	})
}
