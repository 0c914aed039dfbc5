package console_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/auditlens/auditlens/lib/kubeversion"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/console"
	"github.com/auditlens/auditlens/services/report/rollup"
	"github.com/auditlens/auditlens/services/report/store"
)

func TestMain(m *testing.M) { chtest.Main(m) }

// The week the tests read: Monday 2026-11-23 to Sunday 2026-11-29; "now" is in the week after.
var (
	weekStart = time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	week      = console.Window{From: weekStart, To: weekStart.AddDate(0, 0, 7)}
	ingresses = console.BlockerKey{Rule: "removed-api", Group: "extensions", Version: "v1beta1", Resource: "ingresses"}
)

// hostile is attacker-written text in an event's fields: it must be read back as it is.
const hostile = "<script>document.title='pwned'</script>\"' %_\x1b[31m\\"

// seed writes the findings every test reads, each twice (as a redelivery stores it):
// cluster prod, this week: ci (hostile user agent) lists ingresses 3 times from two IPs,
// bob lists them once and uses PSP once; the week before, alice once; cluster staging: one
// ingress list this week. Returns the findings.
func seed(t *testing.T, st *store.Store) []*auditlensv1.Finding {
	t.Helper()
	at := func(d, h int) *timestamppb.Timestamp {
		return timestamppb.New(weekStart.AddDate(0, 0, d).Add(time.Duration(h) * time.Hour))
	}
	ing := func(cluster, id string, ts *timestamppb.Timestamp, user, ua, ip, ns string) *auditlensv1.Finding {
		return &auditlensv1.Finding{RuleId: "removed-api", Cluster: cluster, AuditId: id, EventTime: ts, Verb: "list",
			RequestUri: "/apis/extensions/v1beta1/namespaces/" + ns + "/ingresses?limit=500", ApiGroup: "extensions", ApiVersion: "v1beta1",
			Resource: "ingresses", Namespace: ns, Username: user, UserAgent: ua, SourceIp: ip, ResponseCode: 200,
			DeprecatedIn: "1.14", RemovedIn: "1.22", Replacement: "networking.k8s.io/v1", Message: "use networking.k8s.io/v1",
			Evidence: []*auditlensv1.Evidence{{Path: "objectRef.apiVersion", Value: "v1beta1"}}}
	}
	ci := "system:serviceaccount:ci:deployer"
	fs := []*auditlensv1.Finding{
		ing("prod", "a1", at(0, 9), ci, hostile, "10.0.0.1", "ci"),
		ing("prod", "a2", at(1, 9), ci, hostile, "10.0.0.1", "ci"),
		ing("prod", "a3", at(2, 9), ci, hostile, "10.0.0.1", "web"),
		ing("prod", "a4", at(2, 10), ci, hostile, "10.0.0.2", "ci"),
		ing("prod", "b1", at(3, 9), "bob", "kubectl/v1.21.0 (linux/amd64)", "10.0.0.9", "team-"+hostile),
		ing("prod", "old", at(-3, 9), "alice", "kubectl/v1.19.0", "10.0.0.8", "ci"),
		ing("staging", "s1", at(4, 9), ci, hostile, "10.1.0.1", "ci"),
		{RuleId: "psp", Cluster: "prod", AuditId: "b1", EventTime: at(3, 9), Verb: "list", RequestUri: "/apis/policy/v1beta1/podsecuritypolicies",
			ApiGroup: "policy", ApiVersion: "v1beta1", Resource: "podsecuritypolicies", Username: "bob",
			UserAgent: "kubectl/v1.21.0 (linux/amd64)", SourceIp: "10.0.0.9", ResponseCode: 403, RemovedIn: "1.25"},
		{RuleId: "legacy-sa-token", Cluster: "prod", AuditId: "c1", EventTime: at(4, 9), Verb: "get", RequestUri: "/api/v1/pods",
			ApiVersion: "v1", Resource: "pods", Username: "system:serviceaccount:legacy:old", UserAgent: "Go-http-client/1.1", SourceIp: "10.0.0.7"},
	}
	for range 2 {
		if err := st.WriteFindings(context.Background(), fs); err != nil {
			t.Fatal(err)
		}
	}
	// classify's heartbeats: prod's events go on after its newest finding; migrated sends
	// events and never a finding; staging's classify sends none.
	ms := []store.EventMinute{
		{Cluster: "prod", Minute: weekStart.AddDate(0, 0, 4).Add(9 * time.Hour), Events: 10},
		{Cluster: "prod", Minute: weekStart.AddDate(0, 0, 5).Add(10*time.Hour + 30*time.Minute), Events: 3},
		{Cluster: "migrated", Minute: weekStart.AddDate(0, 0, 2).Add(time.Hour), Events: 1},
	}
	if err := st.WriteEventMinutes(context.Background(), ms); err != nil {
		t.Fatal(err)
	}
	return fs
}

// A client may send the same Audit-ID with several requests: the drill-down lists each
// request with its own time and details, and the request page shows each request's finding.
func TestRequestsSharingAnAuditID(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		ctx := context.Background()
		ingresses := console.BlockerKey{Rule: "removed-api", Group: "extensions", Version: "v1beta1", Resource: "ingresses"}
		request := func(at time.Time, ns string) *auditlensv1.Finding {
			return &auditlensv1.Finding{RuleId: "removed-api", Cluster: "prod", AuditId: "same-id", EventTime: timestamppb.New(at),
				RequestReceived: at.Unix(), Verb: "list", RequestUri: "/apis/extensions/v1beta1/namespaces/" + ns + "/ingresses",
				ApiGroup: "extensions", ApiVersion: "v1beta1", Resource: "ingresses", Namespace: ns, Username: "carol",
				UserAgent: "curl/8.0", SourceIp: "10.0.0.3", RemovedIn: "1.22"}
		}
		first, second := weekStart.Add(9*time.Hour), weekStart.Add(9*time.Hour+30*time.Minute)
		fs := []*auditlensv1.Finding{request(first, "one"), request(second, "two")}
		for range 2 {
			if err := st.WriteFindings(ctx, fs); err != nil {
				t.Fatal(err)
			}
		}
		r := console.Reader{DB: st.DB()}
		callers, _, err := r.Callers(ctx, console.CallersQuery{Cluster: "prod", Key: ingresses, Window: week})
		if err != nil || len(callers) != 1 || callers[0].Findings != 2 {
			t.Fatalf("callers: %+v %v, want carol with 2 findings", callers, err)
		}
		id, _ := strconv.ParseUint(callers[0].ID, 10, 64)
		got, _, err := r.Requests(ctx, console.RequestsQuery{Cluster: "prod", Key: ingresses, Caller: id, Window: week})
		if err != nil || len(got) != 2 || !got[0].Time.Equal(second) || got[0].Namespace != "two" || !got[1].Time.Equal(first) || got[1].Namespace != "one" {
			t.Fatalf("requests: %+v %v, want the two requests of same-id, each with its time and namespace", got, err)
		}
		found, err := r.Request(ctx, "prod", "same-id")
		if err != nil || len(found) != 2 || found[0].Namespace != "two" || found[1].Namespace != "one" {
			t.Errorf("request same-id: %+v %v, want its two requests' findings, newest first", found, err)
		}
	})
}

func TestQueries(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		seed(t, st)
		r := console.Reader{DB: st.DB()}
		testQueries(t, r)
		searchWithNamesKept(t, r, "findings", nil)
	})
}

// TestQueriesOnCluster runs the queries on a cluster's Distributed findings table
// (2 shards x 2 replicas, every finding written twice): they answer as on one server.
func TestQueriesOnCluster(t *testing.T) {
	c := chtest.StartCluster(t, 2, 2)
	st := c.Store(t, "auditlens")
	seed(t, st)
	c.WaitReplicated(t, "auditlens")
	r := console.Reader{DB: st.DB(), Table: "auditlens.findings"}
	testQueries(t, r)
	searchWithNamesKept(t, r, "auditlens.findings", c.WaitReplicated)
}

// searchWithNamesKept compacts the days of r's findings, then searches them again: ordered by
// the names the compaction kept, no page is read over the strings of the day rows.
func searchWithNamesKept(t *testing.T, r console.Reader, table string, settle func(testing.TB, string)) {
	t.Helper()
	ctx := context.Background()
	if _, err := rollup.Compact(ctx, r.DB, rollup.TablesFor(table)); err != nil {
		t.Fatal(err)
	}
	if settle != nil {
		settle(t, "auditlens")
	}
	before := console.SearchesOverStrings()
	t.Run("search with the names kept", func(t *testing.T) { testSearch(ctx, t, r) })
	if n := console.SearchesOverStrings() - before; n != 0 {
		t.Errorf("%d searches read over the strings, though every name is kept", n)
	}
}

func testQueries(t *testing.T, r console.Reader) {
	// With a deadline, as the console reads: every query carries max_execution_time. Ten
	// minutes: a hang guard, which a cold CI machine compiling beside it must not reach.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t.Run("clusters", func(t *testing.T) {
		got, err := r.Clusters(ctx, week.To, kubeversion.MustParse("1.22"))
		if err != nil {
			t.Fatal(err)
		}
		newest := func(d, h int) time.Time { return weekStart.AddDate(0, 0, d).Add(time.Duration(h) * time.Hour) }
		want := []console.ClusterSummary{
			{Name: "migrated", Newest: time.Unix(0, 0).UTC(), NewestEvent: newest(2, 1)},
			{Name: "prod", LastWeek: true, Newest: newest(4, 9), NewestBlocker: newest(3, 9), NewestEvent: newest(5, 10).Add(30 * time.Minute)},
			{Name: "staging", LastWeek: true, Newest: newest(4, 9), NewestBlocker: newest(4, 9), NewestEvent: newest(4, 9)},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("clusters:\n got %+v\nwant %+v", got, want)
		}
		// Judged against 1.25, PSP blocks too; this week is the week read above. Judged
		// against 1.21, nothing blocks.
		got, err = r.Clusters(ctx, week.From, kubeversion.MustParse("1.25"))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 || !got[1].ThisWeek || !got[1].LastWeek || !got[1].NewestBlocker.Equal(newest(3, 9)) {
			t.Errorf("clusters for 1.25 from the week's start: %+v", got)
		}
		got, err = r.Clusters(ctx, week.From, kubeversion.MustParse("1.21"))
		if err != nil || len(got) != 3 || !got[1].NewestBlocker.IsZero() {
			t.Errorf("clusters for 1.21: %+v %v", got, err)
		}
	})
	t.Run("blockers", func(t *testing.T) {
		// Against 1.25 in prod's week: ingresses (4 requests of ci from two IPs, 1 of bob: 3
		// callers, the top three listed) and PSP (bob once), busiest first; each finding was
		// stored twice and counts once.
		got, err := r.Blockers(ctx, "prod", week, kubeversion.MustParse("1.25"))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].Key != ingresses || got[0].Requests != 5 || got[0].Callers != 3 || len(got[0].Top) != 3 ||
			got[0].Top[0].Findings != 3 || got[0].Top[0].UserAgent != hostile || got[0].Top[0].ID == "" || got[0].RemovedIn != "1.22" ||
			got[1].Key.Rule != "psp" || got[1].Requests != 1 || len(got[1].Top) != 1 || got[1].Top[0].Username != "bob" {
			t.Fatalf("blockers for 1.25: %+v", got)
		}
		var sum uint64
		for _, c := range got[0].Top {
			sum += c.Findings
		}
		if sum != got[0].Requests {
			t.Errorf("the top callers of ingresses make %d requests, the blocker %d", sum, got[0].Requests)
		}
		// The two callers of one request each come by name, agent and IP.
		a, b := got[0].Top[1], got[0].Top[2]
		if a.Findings != 1 || b.Findings != 1 || a.Username+a.UserAgent+a.SourceIP >= b.Username+b.UserAgent+b.SourceIP {
			t.Errorf("tied top callers out of order: %+v then %+v", a, b)
		}
		// Names missing where they were first read (a replica behind) are read again.
		restore := console.MissNames()
		again, err := r.Blockers(ctx, "prod", week, kubeversion.MustParse("1.25"))
		restore()
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("blockers with their names read again: %+v %v, want %+v", again, err, got)
		}
		if got, err := r.Blockers(ctx, "prod", week, kubeversion.MustParse("1.21")); err != nil || len(got) != 0 {
			t.Errorf("blockers for 1.21: %+v %v", got, err)
		}
	})
	t.Run("cluster version", func(t *testing.T) {
		// No kubelet or controller-manager in prod's findings; kubectl does not count.
		if v, err := r.ClusterVersion(ctx, "prod", week); err != nil || !v.IsZero() {
			t.Errorf("prod's version %v %v, want none", v, err)
		}
	})
	t.Run("known", func(t *testing.T) {
		// migrated sent events and no finding: known too (the first screen lists it).
		for cluster, want := range map[string]bool{"prod": true, "staging": true, "migrated": true, "no-such-cluster": false} {
			if got, err := r.Known(ctx, cluster); err != nil || got != want {
				t.Errorf("Known(%q) = %v %v, want %v", cluster, got, err, want)
			}
		}
		if got, err := r.Names(ctx); err != nil || !reflect.DeepEqual(got, []string{"migrated", "prod", "staging"}) {
			t.Errorf("names %v %v", got, err)
		}
	})
	t.Run("releases", func(t *testing.T) {
		got, err := r.Releases(ctx, "prod")
		if err != nil {
			t.Fatal(err)
		}
		if want := []kubeversion.Version{kubeversion.MustParse("1.22"), kubeversion.MustParse("1.25")}; !reflect.DeepEqual(got, want) {
			t.Errorf("releases %v, want %v", got, want)
		}
	})
	t.Run("callers", func(t *testing.T) {
		got, more, err := r.Callers(ctx, console.CallersQuery{Cluster: "prod", Key: ingresses, Window: week})
		if err != nil {
			t.Fatal(err)
		}
		day := func(d, h int) time.Time { return weekStart.AddDate(0, 0, d).Add(time.Duration(h) * time.Hour) }
		ci := "system:serviceaccount:ci:deployer"
		want := []console.Caller{
			{Username: ci, UserAgent: hostile, SourceIP: "10.0.0.1", Findings: 3, FirstSeen: day(0, 9), LastSeen: day(2, 9)},
			{Username: "bob", UserAgent: "kubectl/v1.21.0 (linux/amd64)", SourceIP: "10.0.0.9", Findings: 1, FirstSeen: day(3, 9), LastSeen: day(3, 9)},
			{Username: ci, UserAgent: hostile, SourceIP: "10.0.0.2", Findings: 1, FirstSeen: day(2, 10), LastSeen: day(2, 10)},
		}
		ids := map[string]bool{}
		for i := range got {
			if _, err := strconv.ParseUint(got[i].ID, 10, 64); err != nil || ids[got[i].ID] {
				t.Errorf("caller %d: id %q is not a distinct number", i, got[i].ID)
			}
			ids[got[i].ID] = true
			got[i].ID = ""
		}
		if more || !reflect.DeepEqual(got, want) {
			t.Errorf("callers (more %v):\n got %+v\nwant %+v", more, got, want)
		}
		// Pages of one: the second is bob, and more follow it.
		got, more, err = r.Callers(ctx, console.CallersQuery{Cluster: "prod", Key: ingresses, Window: week, Page: console.Page{Limit: 1, Offset: 1}})
		if err != nil || !more || len(got) != 1 || got[0].Username != "bob" {
			t.Errorf("second page of one: %+v more %v err %v", got, more, err)
		}
		got, more, err = r.Callers(ctx, console.CallersQuery{Cluster: "prod", Key: ingresses, Window: week, Page: console.Page{Limit: 1, Offset: 2}})
		if err != nil || more || len(got) != 1 {
			t.Errorf("last page of one: %+v more %v err %v", got, more, err)
		}
	})
	t.Run("requests", func(t *testing.T) {
		callers, _, err := r.Callers(ctx, console.CallersQuery{Cluster: "prod", Key: ingresses, Window: week})
		if err != nil || len(callers) == 0 || callers[0].SourceIP != "10.0.0.1" {
			t.Fatalf("callers: %+v %v", callers, err)
		}
		id, _ := strconv.ParseUint(callers[0].ID, 10, 64)
		q := console.RequestsQuery{Cluster: "prod", Key: ingresses, Caller: id, Window: week, Page: console.Page{Limit: 2}}
		got, more, err := r.Requests(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if !more || len(got) != 2 || got[0].AuditID != "a3" || got[1].AuditID != "a2" {
			t.Fatalf("first page, newest first: %+v more %v", got, more)
		}
		want := console.Request{Time: weekStart.AddDate(0, 0, 2).Add(9 * time.Hour), AuditID: "a3", Verb: "list",
			RequestURI: "/apis/extensions/v1beta1/namespaces/web/ingresses?limit=500", SourceIP: "10.0.0.1", ResponseCode: 200, Namespace: "web",
			Username: "system:serviceaccount:ci:deployer", UserAgent: hostile}
		hash, err := strconv.ParseUint(got[0].AuditHash, 10, 64)
		if err != nil {
			t.Fatalf("audit hash %q: %v", got[0].AuditHash, err)
		}
		got[0].AuditHash = ""
		if got[0] != want {
			t.Errorf("request:\n got %+v\nwant %+v", got[0], want)
		}
		// The request by its audit id's hash and time, as a link to a long audit id names it.
		if fs, err := r.RequestByHash(ctx, "prod", hash, want.Time); err != nil || len(fs) != 1 || fs[0].AuditID != "a3" {
			t.Errorf("request by hash: %+v %v", fs, err)
		}
		q.Page.Offset = 2
		got, more, err = r.Requests(ctx, q)
		if err != nil || more || len(got) != 1 || got[0].AuditID != "a1" {
			t.Errorf("second page: %+v more %v err %v", got, more, err)
		}
	})
	t.Run("request", func(t *testing.T) {
		got, err := r.Request(ctx, "prod", "b1")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].Key.Rule != "psp" || got[1].Key.Rule != "removed-api" || got[1].Namespace != "team-"+hostile ||
			got[0].ResponseCode != 403 || got[1].Replacement != "networking.k8s.io/v1" {
			t.Fatalf("request b1: %+v", got)
		}
		if want := []console.Evidence{{Path: "objectRef.apiVersion", Value: "v1beta1"}}; !reflect.DeepEqual(got[1].Evidence, want) {
			t.Errorf("evidence %+v, want %+v", got[1].Evidence, want)
		}
		if got, err := r.Request(ctx, "staging", "b1"); err != nil || len(got) != 0 {
			t.Errorf("b1 of another cluster: %+v %v", got, err)
		}
	})
	t.Run("search", func(t *testing.T) { testSearch(ctx, t, r) })
	t.Run("bad queries", func(t *testing.T) {
		for name, err := range map[string]error{
			"limit":     second(r.Callers(ctx, console.CallersQuery{Cluster: "prod", Key: ingresses, Window: week, Page: console.Page{Limit: console.MaxLimit + 1}})),
			"offset":    second(r.Callers(ctx, console.CallersQuery{Cluster: "prod", Key: ingresses, Window: week, Page: console.Page{Offset: console.MaxOffset + 1}})),
			"rule":      second(r.Callers(ctx, console.CallersQuery{Cluster: "prod", Window: week})),
			"cluster":   second(r.Requests(ctx, console.RequestsQuery{Key: ingresses, Window: week})),
			"window":    second(r.Requests(ctx, console.RequestsQuery{Cluster: "prod", Key: ingresses, Window: console.Window{From: week.To, To: week.From}})),
			"search by": second(r.Search(ctx, console.SearchQuery{Cluster: "prod", By: "name", Text: "x", Window: week})),
			"text":      second(r.Search(ctx, console.SearchQuery{Cluster: "prod", By: console.ByUser, Window: week})),
		} {
			if !errors.Is(err, console.ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", name, err)
			}
		}
	})
}

// testSearch checks the searches of seed's findings.
func testSearch(ctx context.Context, t *testing.T, r console.Reader) {
	for _, c := range []struct {
		by   console.SearchBy
		text string
		want []string // user@ip rule
	}{
		{console.ByUser, "BOB", []string{"bob@10.0.0.9 psp", "bob@10.0.0.9 removed-api"}},
		{console.ByAgent, "<SCRIPT>", []string{"system:serviceaccount:ci:deployer@10.0.0.1 removed-api", "system:serviceaccount:ci:deployer@10.0.0.2 removed-api"}},
		{console.ByNamespace, "team-", []string{"bob@10.0.0.9 removed-api"}},
		{console.ByNamespace, "%", []string{"bob@10.0.0.9 removed-api"}}, // a character, not a wildcard
		{console.ByUser, "_", nil},
		{console.ByUser, "alice", nil}, // the week before
	} {
		got, more, err := r.Search(ctx, console.SearchQuery{Cluster: "prod", By: c.by, Text: c.text, Window: week})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, m := range got {
			names = append(names, fmt.Sprintf("%s@%s %s", m.Username, m.SourceIP, m.Key.Rule))
		}
		if more || !reflect.DeepEqual(names, c.want) {
			t.Errorf("search %s %q: %q (more %v), want %q", c.by, c.text, names, more, c.want)
		}
	}
	got, _, err := r.Search(ctx, console.SearchQuery{Cluster: "prod", By: console.ByAgent, Text: "script", Window: week})
	if err != nil || len(got) == 0 || !reflect.DeepEqual(got[0].Namespaces, []string{"ci", "web"}) || got[0].Findings != 3 ||
		got[0].UserAgent != hostile || got[0].RemovedIn != "1.22" || got[0].Key != ingresses {
		t.Errorf("the first match, its namespaces, user agent and removal: %+v %v", got, err)
	}
}

func second[T any](_ T, _ bool, err error) error { return err }
