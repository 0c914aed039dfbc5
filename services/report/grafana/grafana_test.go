package grafana

import (
	"bytes"
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/store"
)

var update = flag.Bool("update", false, "rewrite testdata/panels.golden and the dashboard's day-rows blocks")

func TestMain(m *testing.M) { chtest.Main(m) }

const dashboardDir = "../../../deploy/grafana/dashboards"

func loadDashboard(t *testing.T) *Dashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dashboardDir, "auditlens-upgrade.json"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The seeded month: four weeks from Monday 2026-11-02 to Sunday 2026-11-29.
var (
	from = time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	to   = time.Date(2026, 11, 29, 23, 59, 59, 0, time.UTC)
)

type caller struct{ user, agent, ns, ip string }

var (
	alice   = caller{"alice", "kubectl/v1.20.0 (linux/amd64)", "default", "10.0.0.1"}
	pspSA   = caller{"system:serviceaccount:kube-system:psp-controller", "psp-controller/v1.2", "kube-system", "10.0.0.2"}
	hostile = caller{"<script>alert(1)</script>", "'; DROP TABLE findings; --", "team-a", "10.0.0.3"}
	bob     = caller{"bob", "kubectl/v1.30.0", "default", "10.0.0.4"}
	carol   = caller{"carol", "curl/8.0", "default", "10.0.0.5"}
	other   = caller{"system:serviceaccount:kube-system:other", "other/v1", "kube-system", "10.1.0.1"}
)

type api struct{ rule, group, version, resource, deprecated, removed, replacement string }

var (
	ingress = api{"removed-api", "extensions", "v1beta1", "ingresses", "1.14", "1.22", "networking.k8s.io/v1"}
	psp     = api{"psp", "policy", "v1beta1", "podsecuritypolicies", "1.21", "1.25", "Pod Security Admission"}
	flow    = api{"removed-api", "flowcontrol.apiserver.k8s.io", "v1beta3", "flowschemas", "1.29", "1.32", "flowcontrol.apiserver.k8s.io/v1"}
	deploy  = api{"deprecated-api", "apps", "v1", "deployments", "1.30", "", ""}
	future  = api{"removed-api", "example.io", "v1alpha1", "widgets", "1.33", "1.36", "example.io/v1"}
)

func at(month time.Month, day, hour int) time.Time {
	return time.Date(2026, month, day, hour, 0, 0, 0, time.UTC)
}

func mk(cluster, id string, a api, c caller, when time.Time) *auditlensv1.Finding {
	sev := auditlensv1.Severity_SEVERITY_CRITICAL
	if a.removed == "" {
		sev = auditlensv1.Severity_SEVERITY_WARNING
	}
	return &auditlensv1.Finding{RuleId: a.rule, Severity: sev, Cluster: cluster, AuditId: id,
		EventTime: timestamppb.New(when), Verb: "list", ApiGroup: a.group, ApiVersion: a.version,
		Resource: a.resource, DeprecatedIn: a.deprecated, RemovedIn: a.removed, Replacement: a.replacement,
		Username: c.user, UserAgent: c.agent, Namespace: c.ns, SourceIp: c.ip, ResponseCode: 200}
}

// seed writes the dataset, every finding at least twice (redeliveries count once).
func seed(t *testing.T, st *store.Store) {
	t.Helper()
	fs := []*auditlensv1.Finding{
		mk("prod", "a1", ingress, alice, at(11, 3, 10)),
		mk("prod", "a2", ingress, alice, at(11, 4, 11)),
		mk("prod", "p0", psp, pspSA, at(10, 20, 9)), // before the range
		mk("prod", "p1", psp, pspSA, at(11, 10, 9)),
		mk("prod", "p2", psp, pspSA, at(11, 17, 9)),
		mk("prod", "p3", psp, pspSA, at(11, 24, 9)),
		mk("prod", "f1", flow, hostile, at(11, 25, 12)),
		mk("prod", "d1", deploy, bob, at(11, 20, 8)),
		mk("prod", "x1", future, carol, at(11, 21, 8)),
		mk("staging", "s1", psp, other, at(11, 24, 10)),
	}
	ctx := context.Background()
	for range 2 {
		if err := st.WriteFindings(ctx, fs); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.WriteFindings(ctx, fs[:1]); err != nil {
		t.Fatal(err)
	}
}

func runQuery(t *testing.T, db *sql.DB, q string) [][]string {
	t.Helper()
	rows, err := db.Query(q)
	if err != nil {
		t.Fatalf("%v\n%s", err, q)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		line := make([]string, len(cols))
		for i, v := range vals {
			switch v := v.(type) {
			case time.Time:
				line[i] = v.UTC().Format(time.DateTime)
			default:
				line[i] = fmt.Sprint(v)
			}
		}
		out = append(out, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func format(rows [][]string) string {
	var b strings.Builder
	for _, r := range rows {
		b.WriteString(strings.Join(r, " | "))
		b.WriteByte('\n')
	}
	return b.String()
}

// results runs the variable queries and every panel query and returns them as text.
func results(t *testing.T, d *Dashboard, db *sql.DB) (string, map[string][][]string) {
	t.Helper()
	ctx := Context{From: from, To: to, Interval: time.Hour,
		Vars: map[string][]string{"cluster": {"prod"}, "target_version": {"1.35"}}, All: map[string]bool{}}
	var b strings.Builder
	byPanel := map[string][][]string{}
	for _, v := range d.Variables {
		if v.Type != "query" {
			continue
		}
		q, err := Expand(v.Query, ctx)
		if err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		rows := runQuery(t, db, q)
		fmt.Fprintf(&b, "== variable %s\n%s", v.Name, format(rows))
		byPanel["$"+v.Name] = rows
		if v.Name == "rule" {
			for _, r := range rows {
				ctx.Vars["rule"] = append(ctx.Vars["rule"], r[0])
			}
			ctx.All["rule"] = true
		}
	}
	run := func(label string, c Context) {
		for _, q := range d.Queries {
			sqlText, err := Expand(q.SQL, c)
			if err != nil {
				t.Fatalf("panel %q %s: %v", q.Panel, q.RefID, err)
			}
			if strings.Contains(sqlText, "$") {
				t.Fatalf("panel %q %s: unexpanded $ left in\n%s", q.Panel, q.RefID, sqlText)
			}
			rows := runQuery(t, db, sqlText)
			key := q.Panel + label + " " + q.RefID
			fmt.Fprintf(&b, "== %s\n%s", key, format(rows))
			byPanel[key] = rows
		}
	}
	run("", ctx)
	// The per-rule panels again with one rule selected.
	one := ctx
	one.Vars = map[string][]string{"cluster": {"prod"}, "target_version": {"1.35"}, "rule": {"psp"}}
	one.All = map[string]bool{}
	for _, q := range d.Queries {
		if strings.Contains(q.SQL, "$rule") {
			sqlText, err := Expand(q.SQL, one)
			if err != nil {
				t.Fatal(err)
			}
			rows := runQuery(t, db, sqlText)
			key := q.Panel + " [rule=psp] " + q.RefID
			fmt.Fprintf(&b, "== %s\n%s", key, format(rows))
			byPanel[key] = rows
		}
	}
	return b.String(), byPanel
}

func TestDashboardQueriesOnBothEngines(t *testing.T) {
	d := loadDashboard(t)
	if len(d.Queries) < 10 {
		t.Fatalf("only %d panel queries found", len(d.Queries))
	}
	golden := filepath.Join("testdata", "panels.golden")
	outputs := map[chtest.Engine]string{}
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		seed(t, st)
		out, byPanel := results(t, d, st.DB())
		outputs[e] = out
		checkFacts(t, byPanel)
		if *update && e == chtest.EngineServer {
			if err := os.MkdirAll("testdata", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run with -update)", err)
		}
		if out != string(want) {
			t.Errorf("panel results on %s differ from %s:\n%s", e, golden, diff(string(want), out))
		}
	})
	if a, b := outputs[chtest.EngineServer], outputs[chtest.EngineEmbedded]; a != "" && b != "" && a != b {
		t.Errorf("the engines disagree:\n%s", diff(a, b))
	}
}

// checkFacts asserts what the dashboard is for, independently of the golden file.
func checkFacts(t *testing.T, p map[string][][]string) {
	t.Helper()
	expect := func(key string, want [][]string) {
		t.Helper()
		if got := p[key]; format(got) != format(want) {
			t.Errorf("%s:\n got:\n%s want:\n%s", key, format(got), format(want))
		}
	}
	expect("$cluster", [][]string{{"prod"}, {"staging"}})
	expect("$rule", [][]string{{"deprecated-api"}, {"psp"}, {"removed-api"}})
	// a1 a2 p1 p2 p3 f1: not p0 (before the range), x1 (removed in 1.36), d1, s1 (staging).
	expect("Blocker findings A", [][]string{{"6"}})
	expect("Blocker callers A", [][]string{{"3"}})
	expect("Findings by rule A", [][]string{
		{"removed-api", "4", "2026-11-03 10:00:00", "2026-11-25 12:00:00"},
		{"psp", "3", "2026-11-10 09:00:00", "2026-11-24 09:00:00"},
		{"deprecated-api", "1", "2026-11-20 08:00:00", "2026-11-20 08:00:00"},
	})
	expect("Upgrade blockers A", [][]string{
		{"psp", "policy", "v1beta1", "podsecuritypolicies", "1.25", "Pod Security Admission", "3", "1", "2026-11-10 09:00:00", "2026-11-24 09:00:00"},
		{"removed-api", "extensions", "v1beta1", "ingresses", "1.22", "networking.k8s.io/v1", "2", "1", "2026-11-03 10:00:00", "2026-11-04 11:00:00"},
		{"removed-api", "flowcontrol.apiserver.k8s.io", "v1beta3", "flowschemas", "1.32", "flowcontrol.apiserver.k8s.io/v1", "1", "1", "2026-11-25 12:00:00", "2026-11-25 12:00:00"},
	})
	expect("Who calls the blockers A", [][]string{
		{"psp", pspSA.user, "service account", pspSA.agent, pspSA.ns, pspSA.ip, "3", "2026-11-10 09:00:00", "2026-11-24 09:00:00"},
		{"removed-api", "alice", "user", alice.agent, alice.ns, alice.ip, "2", "2026-11-03 10:00:00", "2026-11-04 11:00:00"},
		{"removed-api", hostile.user, "user", hostile.agent, hostile.ns, hostile.ip, "1", "2026-11-25 12:00:00", "2026-11-25 12:00:00"},
	})
	expect("Top service accounts [rule=psp] A", [][]string{{"psp", pspSA.user, "3"}})
	expect("Top users [rule=psp] A", nil)
	expect("New and resolved callers per week A", [][]string{
		{"2026-11-02 00:00:00", "1"}, {"2026-11-16 00:00:00", "2"}, {"2026-11-23 00:00:00", "1"},
	})
	expect("New and resolved callers per week B", [][]string{
		{"2026-11-09 00:00:00", "1"}, {"2026-11-23 00:00:00", "2"},
	})
	expect("Blocker findings per week A", [][]string{
		{"2026-11-02 00:00:00", "removed-api", "2"},
		{"2026-11-09 00:00:00", "psp", "1"},
		{"2026-11-16 00:00:00", "psp", "1"},
		{"2026-11-23 00:00:00", "psp", "1"},
		{"2026-11-23 00:00:00", "removed-api", "1"},
	})
}

func diff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out strings.Builder
	for i := 0; i < max(len(al), len(bl)); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			fmt.Fprintf(&out, "line %d:\n- %s\n+ %s\n", i+1, x, y)
		}
	}
	return out.String()
}

// TestDashboardInlinesTheCurrentDayRows: every query reads the day rows through a block of
// rollup.CurrentSQL with its cluster and days inside, written by InlineDayRows (-update
// rewrites the dashboard), never through the view itself.
func TestDashboardInlinesTheCurrentDayRows(t *testing.T) {
	path := filepath.Join(dashboardDir, "auditlens-upgrade.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out, n, err := InlineDayRows(b)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	reads := 0
	for _, sql := range append(queriesOf(d), variableQueriesOf(d)...) {
		if !strings.Contains(sql, "finding_days") {
			continue
		}
		reads++
		outside := dayRows.ReplaceAllString(sql, "")
		if strings.Contains(outside, "finding_days") || strings.Contains(outside, "finding_rows") || strings.Contains(outside, "finding_hour") {
			t.Errorf("a query reads the day rows outside a finding_days_current block:\n%s", sql)
		}
	}
	if reads < 12 || n < reads {
		t.Errorf("%d queries read the day rows in %d blocks; want at least 12, each in a block", reads, n)
	}
	if *update {
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(out, b) {
		t.Errorf("%s: the day-rows blocks are not rollup.CurrentSQL's (run go test ./grafana -run TestDashboardInlinesTheCurrentDayRows -update)", path)
	}
}

func queriesOf(d *Dashboard) []string {
	var out []string
	for _, q := range d.Queries {
		out = append(out, q.SQL)
	}
	return out
}

func variableQueriesOf(d *Dashboard) []string {
	var out []string
	for _, v := range d.Variables {
		if v.Query != "" {
			out = append(out, v.Query)
		}
	}
	return out
}
