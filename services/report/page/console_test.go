package page

import (
	"context"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/auditlens/auditlens/lib/testkit"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/access"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/store"
	"github.com/auditlens/auditlens/services/report/weekly"
)

// consoleNow is a Wednesday, 15:00 UTC: the last one at or before the tests' now (testkit.Now),
// so its findings are within the store's retention and the console's clock reads a day whose
// week began the Monday before (day(-2)) and ends the Sunday after (day(4)), with the last full
// week empty. Its month and year are those of now: AUDITLENS_TEST_NOW moves it across them.
var consoleNow = lastWednesday(testkit.Now().UTC())

func lastWednesday(now time.Time) time.Time {
	d := time.Date(now.Year(), now.Month(), now.Day(), 15, 0, 0, 0, time.UTC)
	d = d.AddDate(0, 0, -((int(d.Weekday()) - int(time.Wednesday) + 7) % 7))
	if d.After(now) {
		d = d.AddDate(0, 0, -7)
	}
	return d
}

// day is the date days after consoleNow's, as the console writes it.
func day(days int) string { return consoleNow.AddDate(0, 0, days).Format(time.DateOnly) }

// seedConsole writes this week's findings of cluster "prod": two callers of extensions/v1beta1
// ingresses, one with a hostile user agent and namespace, 60 requests of one of them (more
// than a page).
func seedConsole(t *testing.T, st *store.Store) {
	t.Helper()
	var fs []*auditlensv1.Finding
	for i := range 61 {
		ua, user, ns := "kubectl/v1.21.0 (linux/amd64)", "bob", "web"
		if i > 0 {
			ua, user, ns = hostile, "system:serviceaccount:ci:"+hostile, "ns-"+hostile
		}
		fs = append(fs, &auditlensv1.Finding{RuleId: "removed-api", Cluster: "prod", AuditId: "id-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26),
			EventTime: timestamppb.New(consoleNow.Add(-time.Duration(i) * time.Minute)), Verb: "list",
			RequestUri: "/apis/extensions/v1beta1/namespaces/" + ns + "/ingresses", ApiGroup: "extensions", ApiVersion: "v1beta1",
			Resource: "ingresses", Namespace: ns, Name: hostile, Username: user, UserAgent: ua, SourceIp: "10.0.0.1", ResponseCode: 200,
			RemovedIn: "1.22", DeprecatedIn: "1.14", Replacement: "networking.k8s.io/v1"})
	}
	if err := st.WriteFindings(context.Background(), fs); err != nil {
		t.Fatal(err)
	}
}

// testLimits are the console's limits in the tests of what its pages say: the default
// lookback and concurrency, and a deadline that a CI machine busy with other suites cannot
// reach (the default 5 s is a bound for production load, not a speed test; the bounds are
// tested by TestConsoleBoundsRequests).
var testLimits = Limits{Lookback: DefaultLimits().Lookback, MaxQueries: DefaultLimits().MaxQueries, QueryTimeout: time.Minute}

func consoleServer(t *testing.T, st *store.Store) *httptest.Server {
	h := &Handler{DB: st.DB(), Cluster: "default", DefaultTarget: weekly.Version{Major: 1, Minor: 33},
		Releases: []weekly.Version{{Major: 1, Minor: 16}, {Major: 1, Minor: 22}, {Major: 1, Minor: 25}},
		Log:      slog.New(slog.DiscardHandler), Now: func() time.Time { return consoleNow }, Limits: testLimits}
	mux := http.NewServeMux()
	h.Register(mux)
	srv := httptest.NewServer(access.Loopback(mux))
	t.Cleanup(srv.Close)
	return srv
}

func fetch(t testing.TB, method, u string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

const escapedHostile = "&lt;script&gt;alert(1)&lt;/script&gt;&#34;&#39;"

func TestConsolePages(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		seedConsole(t, st)
		srv := consoleServer(t, st)
		get := func(path string, want ...string) string {
			t.Helper()
			resp, body := fetch(t, http.MethodGet, srv.URL+path)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
			}
			if csp := resp.Header.Get("Content-Security-Policy"); csp != CSP || !strings.Contains(csp, "form-action 'self'") {
				t.Errorf("%s: CSP %q", path, csp)
			}
			if strings.Contains(body, "<script>alert") {
				t.Errorf("%s: a hostile value is not escaped", path)
			}
			for _, w := range want {
				if !strings.Contains(body, w) {
					t.Errorf("%s: %q not in the page:\n%.3000s", path, w, body)
				}
			}
			return body
		}
		// The first screen: prod's blockers for its target (no kubelet names its version: the
		// catalogue's newest, 1.25) in the 30 days to now, with the busiest callers.
		index := get("/", `<a class="report-link" href="/report?cluster=prod&amp;target-version=1.25">`,
			`<span class="blocker-count">1</span> blocker for 1.25`, "Target 1.25: the catalogue&#39;s newest release. Window: "+day(-29)+" to "+day(0)+" (UTC), the last 30 days.",
			`<td class="n">61</td><td class="n"><a class="callers-link" href="/callers?cluster=prod&amp;days=30&amp;group=extensions&amp;resource=ingresses&amp;rule=removed-api&amp;target-version=1.25&amp;until=`+day(0)+`&amp;version=v1beta1&amp;week-ending=`+day(4)+`">2</a></td>`,
			"Weekly report (week ending "+day(4)+"): ",
			`<a class="blocker-week" href="/report?cluster=prod&amp;target-version=1.25&amp;week-ending=`+day(4)+`">`+day(0)+` 15:00:00Z</a>`,
			`<option value="" selected>each cluster&#39;s next release</option>`, `<option value="1.16">`, `<option value="1.33">`)
		if strings.Contains(index, `<option value="1.21"`) {
			t.Error("the index offers a target version that no release names")
		}
		if n := strings.Count(index, `class="requests-link"`); n != 2 {
			t.Errorf("the index links to %d callers' requests, want 2", n)
		}
		// From the first screen to the callers, in the same window, then to the requests.
		callers := get(hrefOf(t, index, "callers-link"), "Showing the 30 days to "+day(0)+".", `<td class="n">60</td>`, `<td class="n">1</td>`)
		if got, want := hrefOf(t, index, "requests-link"), hrefOf(t, callers, "requests-link"); got != want {
			t.Errorf("the index's top caller links to %s, the callers page to %s", got, want)
		}
		// A week-ending that is not a Sunday means the week it falls in.
		get("/report?cluster=prod&target-version=1.22&week-ending="+day(0), `<option value="`+day(4)+`" selected>`)
		// The report without a week: the last full week is empty, so this week so far.
		get("/report?cluster=prod&target-version=1.22", "Showing this week so far: the last full week has no findings.",
			`<option value="`+day(4)+`" selected>`+day(-2)+` to `+day(4)+` (this week so far)</option>`,
			`<a class="callers-link" href="/callers?cluster=prod&amp;group=extensions&amp;resource=ingresses&amp;rule=removed-api&amp;target-version=1.22&amp;version=v1beta1&amp;week-ending=`+day(4)+`">`,
			`href="/report?cluster=prod&amp;format=csv&amp;target-version=1.22&amp;week-ending=`+day(4)+`"`, `form id="controls"`)
		get("/report?cluster=prod&target-version=1.22&week-ending="+day(-3), "Showing the last full week.", `id="no-blockers"`)
		scope := "cluster=prod&target-version=1.22&week-ending=" + day(4)
		key := "&rule=removed-api&group=extensions&version=v1beta1&resource=ingresses"
		get("/callers?"+scope+key, `<td class="n">60</td>`, `<td class="n">1</td>`, "system:serviceaccount:ci:"+escapedHostile)
		requests := hrefOf(t, get("/callers?"+scope+key), "requests-link")
		first := get(requests, `id="next"`, "Rows 1 to 50.", "system:serviceaccount:ci:"+escapedHostile)
		if n := strings.Count(first, `<tr class="request">`); n != 50 {
			t.Errorf("first page of requests: %d rows, want 50", n)
		}
		second := get(requests+"&offset=50", `id="prev"`, "Rows 51 to 60.")
		if strings.Contains(second, `id="next"`) || strings.Count(second, `<tr class="request">`) != 10 {
			t.Error("the second page of requests is not the last 10")
		}
		get("/request?"+scope+"&audit-id=id-a", `<dd class="mono" id="audit-id"><span title="id-a">id-a</span></dd>`, "networking.k8s.io/v1")
		get("/search?"+scope+"&by=namespace&q=NS-%3C", `<tr class="match">`, "ns-"+escapedHostile)
		get("/search?"+scope+"&by=user&q=nobody", `id="empty"`)
		get("/search?"+scope, `form id="search-form"`)
	})
}

func TestConsoleRejects(t *testing.T) {
	_, st := chtest.ServerStore(t)
	srv := consoleServer(t, st)
	scope := "cluster=prod&target-version=1.22&week-ending=" + day(4)
	key := "&rule=removed-api&group=extensions&version=v1beta1&resource=ingresses"
	for _, c := range []struct{ path, param string }{
		{"/?target-version=one", "target-version"},
		{"/?cluster=prod", "cluster"}, // the index takes no cluster
		{"/report?format=pdf", "format"},
		{"/report?week-ending=2026-13-01", "week-ending"},
		{"/report?cluster=a&cluster=b", "cluster"},
		{"/report?cluster=" + strings.Repeat("x", 2000), "cluster"},
		{"/callers?" + scope, "rule"},
		{"/callers?" + scope + key + "&offset=-1", "offset"},
		{"/callers?" + scope + key + "&offset=10001", "offset"},
		{"/callers?" + scope + key + "&limit=5", "limit"},
		{"/requests?" + scope + key + "&agent=" + strings.Repeat("a", 70000), "agent"},
		{"/requests?" + scope + key + "&caller=x", "caller"},
		{"/requests?" + scope + key, "caller"},
		{"/?target-version=2.0", "target-version"},
		{"/report?cluster=prod&target-version=1.15", "target-version"},
		{"/callers?" + scope + key + "&days=30", "days"},
		{"/request?" + scope, "audit-id"},
		{"/search?" + scope + "&by=name&q=x", "by"},
		{"/search?" + scope + "&q=" + strings.Repeat("x", 300), "q"},
		{"/search?" + scope + "&q=%zz", "query"},
	} {
		resp, body := fetch(t, http.MethodGet, srv.URL+c.path)
		if resp.StatusCode != http.StatusBadRequest || !strings.HasPrefix(body, c.param+":") {
			t.Errorf("%.80s: %d %q, want 400 naming %s", c.path, resp.StatusCode, body, c.param)
		}
	}
	for _, p := range []string{"/nope", "/report/x", "/callers/"} {
		if resp, _ := fetch(t, http.MethodGet, srv.URL+p); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", p, resp.StatusCode)
		}
	}
	if resp, _ := fetch(t, http.MethodPost, srv.URL+"/"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d, want 405", resp.StatusCode)
	}
	// An unknown cluster is a 404, not an all-clear.
	if resp, body := fetch(t, http.MethodGet, srv.URL+"/report?cluster=no-such-cluster&target-version=1.22"); resp.StatusCode != http.StatusNotFound ||
		!strings.Contains(body, "no-such-cluster") {
		t.Errorf("unknown cluster: %d %.300s", resp.StatusCode, body)
	}
	// An empty store: the index says how findings arrive.
	if _, body := fetch(t, http.MethodGet, srv.URL+"/"); !strings.Contains(body, `id="no-clusters"`) {
		t.Errorf("empty index: %.500s", body)
	}
}

// TestReportOpensTheNewestWeek: with nothing this week or the last (the sample of `make run`),
// a report without a week shows the week of the newest use of a blocker, else of the newest
// event, and says so.
func TestReportOpensTheNewestWeek(t *testing.T) {
	_, st := chtest.ServerStore(t)
	old := func(id string, at time.Time, removedIn string) *auditlensv1.Finding {
		return &auditlensv1.Finding{RuleId: "removed-api", Cluster: "sample", AuditId: id, EventTime: timestamppb.New(at),
			ApiGroup: "coordination.k8s.io", ApiVersion: "v1beta1", Resource: "leases", RemovedIn: removedIn}
	}
	if err := st.WriteFindings(context.Background(), []*auditlensv1.Finding{
		old("a", time.Date(2019, 1, 2, 15, 1, 16, 0, time.UTC), "1.22"),
		old("b", time.Date(2021, 3, 12, 15, 11, 4, 0, time.UTC), ""),
	}); err != nil {
		t.Fatal(err)
	}
	srv := consoleServer(t, st)
	for _, c := range []struct{ target, note string }{
		{"1.33", "Showing the week of the newest use of a blocker (ending 2019-01-06): this week and the last have no findings."},
		{"1.21", "Showing the week of the newest event (ending 2021-03-14): this week and the last have no findings."},
	} {
		_, body := fetch(t, http.MethodGet, srv.URL+"/report?cluster=sample&target-version="+c.target)
		if !strings.Contains(body, c.note) {
			t.Errorf("target %s: %q not in %.2000s", c.target, c.note, body)
		}
	}
	_, index := fetch(t, http.MethodGet, srv.URL+"/")
	for _, want := range []string{
		`<a class="blocker-week" href="/report?cluster=sample&amp;target-version=1.25&amp;week-ending=2019-01-06">2019-01-02 15:01:16Z</a>`,
		"Window: 2021-02-11 to 2021-03-12 (UTC), the 30 days to the newest finding",
		"below, the 30 days to its newest use (2018-12-04 to 2019-01-02)",
		`<span class="blocker-count">1</span> blocker for 1.25`,
		`<a class="callers-link" href="/callers?cluster=sample&amp;days=30&amp;group=coordination.k8s.io&amp;resource=leases&amp;rule=removed-api&amp;target-version=1.25&amp;until=2019-01-02&amp;version=v1beta1&amp;week-ending=2019-01-06">1</a>`,
	} {
		if !strings.Contains(index, want) {
			t.Errorf("index: %q not in\n%.4000s", want, index)
		}
	}
	// Unknown cluster: 404 naming the known ones.
	resp, body := fetch(t, http.MethodGet, srv.URL+"/callers?cluster=smaple&rule=psp")
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, `<a href="/report?cluster=sample">sample</a>`) {
		t.Errorf("unknown cluster: %d %s", resp.StatusCode, body)
	}
}

// hrefOf is the first link of class in body, unescaped.
func hrefOf(t testing.TB, body, class string) string {
	t.Helper()
	m := regexp.MustCompile(`class="` + class + `" href="([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no %s link in:\n%.3000s", class, body)
	}
	return html.UnescapeString(m[1])
}

// TestLongUserAgentLinksOpen: a 70,000-byte user agent and audit id (more than a URL
// carries) give links from the first screen to its callers, its requests and one request
// that all open.
func TestLongUserAgentLinksOpen(t *testing.T) {
	_, st := chtest.ServerStore(t)
	ua := "kubectl/v1.21.0 " + strings.Repeat("A", 70000)
	// The Audit-ID header is copied into the event at any length.
	id := "long-1" + strings.Repeat("B", 70000)
	if err := st.WriteFindings(context.Background(), []*auditlensv1.Finding{{RuleId: "removed-api", Cluster: "prod", AuditId: id,
		EventTime: timestamppb.New(consoleNow.Add(-time.Hour)), Verb: "list", ApiGroup: "extensions", ApiVersion: "v1beta1",
		Resource: "ingresses", Username: "bob", UserAgent: ua, SourceIp: "10.0.0.1", RemovedIn: "1.22"}}); err != nil {
		t.Fatal(err)
	}
	srv := consoleServer(t, st)
	open := func(path string) string {
		t.Helper()
		if len(path) > 8000 {
			t.Fatalf("a link of %d bytes", len(path))
		}
		resp, body := fetch(t, http.MethodGet, srv.URL+path)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%.200s: %d %.300s", path, resp.StatusCode, body)
		}
		return body
	}
	index := open("/")
	callers := open(hrefOf(t, index, "callers-link"))
	requests := open(hrefOf(t, callers, "requests-link"))
	if !strings.Contains(open(hrefOf(t, index, "requests-link")), "long-1") || !strings.Contains(requests, "long-1") {
		t.Fatal("the requests page does not list the request")
	}
	if body := open(hrefOf(t, requests, "request-link")); !strings.Contains(body, "long-1BBBB") {
		t.Fatal("the request page does not show the request")
	}
}

// TestConsoleBoundsRequests: beyond Limits.MaxQueries requests at once, the next gets 503
// with Retry-After without reading the store; once a slot frees, it is served.
func TestConsoleBoundsRequests(t *testing.T) {
	_, st := chtest.ServerStore(t)
	seedConsole(t, st)
	h := &Handler{DB: st.DB(), Cluster: "prod", Releases: []weekly.Version{{Major: 1, Minor: 22}},
		Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return consoleNow }, Limits: Limits{MaxQueries: 2, QueryTimeout: 5 * time.Second}}
	mux := http.NewServeMux()
	h.Register(mux)
	srv := httptest.NewServer(access.Loopback(mux))
	defer srv.Close()
	var held []func()
	for range 2 {
		release, ok := h.admit()
		if !ok {
			t.Fatal("a slot below the bound was refused")
		}
		held = append(held, release)
	}
	for _, p := range []string{"/", "/report?cluster=prod", "/search?cluster=prod&q=x"} {
		resp, body := fetch(t, http.MethodGet, srv.URL+p)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || strings.Contains(body, "prod") {
			t.Errorf("%s over the bound: %d Retry-After %q %q", p, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
	held[0]()
	if resp, body := fetch(t, http.MethodGet, srv.URL+"/"); resp.StatusCode != http.StatusOK || !strings.Contains(body, "prod") {
		t.Errorf("with a slot free: %d %.300s", resp.StatusCode, body)
	}
	held[1]()
}

// TestConsoleNewestEvent: the first screen says when each cluster last sent an event, finding
// or not (classify's heartbeats): a migrated cluster with events and no finding is listed, live
// and not silent; one whose events stopped two days ago is warned about; prod's newest event is
// its newest finding, newer than its last heartbeat.
func TestConsoleNewestEvent(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		seedConsole(t, st)
		ms := []store.EventMinute{
			{Cluster: "prod", Minute: consoleNow.Add(-48 * time.Hour), Events: 7},
			{Cluster: "migrated", Minute: consoleNow.Add(-time.Hour), Events: 7},
			{Cluster: "migrated", Minute: consoleNow.Add(-30 * time.Minute), Events: 2},
			{Cluster: "stalled", Minute: consoleNow.Add(-50 * time.Hour), Events: 1},
		}
		if err := st.WriteEventMinutes(context.Background(), ms); err != nil {
			t.Fatal(err)
		}
		srv := consoleServer(t, st)
		resp, body := fetch(t, http.MethodGet, srv.URL+"/")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/: %d %s", resp.StatusCode, body)
		}
		section := func(cluster string) string {
			t.Helper()
			_, s, ok := strings.Cut(body, `<section class="cluster" id="cluster-`+cluster+`">`)
			if !ok {
				t.Fatalf("no section of %s:\n%.3000s", cluster, body)
			}
			s, _, _ = strings.Cut(s, "</section>")
			return s
		}
		for cluster, want := range map[string][]string{
			"prod":     {`Newest event <span class="newest-event">` + day(0) + ` 15:00:00Z</span>, newest finding <span class="newest-finding">` + day(0) + ` 15:00:00Z</span>.`},
			"migrated": {`Newest event <span class="newest-event">` + day(0) + ` 14:30:00Z</span>, newest finding <span class="newest-finding">-</span>.`, "the last 30 days."},
			"stalled":  {`Newest event <span class="newest-event">` + day(-2) + ` 13:00:00Z</span>`, `id="silent-stalled"`, "No event from this cluster since " + day(-2) + " 13:00:00Z"},
		} {
			s := section(cluster)
			for _, w := range want {
				if !strings.Contains(s, w) {
					t.Errorf("%s: %q not in its section:\n%s", cluster, w, s)
				}
			}
			if cluster != "stalled" && strings.Contains(s, `class="warning" id="silent-`) {
				t.Errorf("%s: warned as silent:\n%s", cluster, s)
			}
		}
	})
}

// The first screen names the release the cluster runs (its apiserver's agent, from classify's
// heartbeats) and lists what the upgrade to the next release breaks first, then what fails
// already, counted apart; the target is the release after the cluster's.
func TestIndexFailingNowApart(t *testing.T) {
	index := indexOfRelease(t, "1.28", "/", []string{"a extensions/v1beta1 ingresses 1.22", "b extensions/v1beta1 ingresses 1.22",
		"c flowcontrol.apiserver.k8s.io/v1beta2 flowschemas 1.29", "d policy/v1beta1 poddisruptionbudgets 1.25"},
		weekly.Version{Major: 1, Minor: 22}, weekly.Version{Major: 1, Minor: 25}, weekly.Version{Major: 1, Minor: 29})
	for _, want := range []string{
		"Target 1.29: the release after 1.28, the cluster&#39;s.",
		`<span class="blocker-count">3</span> blockers for 1.29 (<span class="new-count">1</span> new, <span class="failing-count">2</span> failing now)`,
		`The cluster runs <span class="current">1.28</span> (the kube-apiserver`,
		`<tr class="part"><th colspan="8">Breaks on the upgrade to 1.29 (removed after 1.28): 1</th></tr>`,
		`<tr class="part"><th colspan="8">Failing now (removed at or before 1.28, the release the cluster runs: these callers fail today, a removed API with 404): 2</th></tr>`,
	} {
		if !strings.Contains(index, want) {
			t.Errorf("index: %q not in\n%.6000s", want, index)
		}
	}
	// The new blocker comes first, then the failing ones busiest first.
	i := strings.Index(index, "flowschemas")
	j := strings.Index(index, "ingresses")
	k := strings.Index(index, "poddisruptionbudgets")
	if i < 0 || j < i || k < j {
		t.Errorf("order: flowschemas at %d, ingresses at %d, poddisruptionbudgets at %d", i, j, k)
	}
}

// An upgrade that skips releases (1.28 to 1.31, chosen): each hop's blockers under its own
// title, in order, and the hops that need nothing named.
func TestIndexHops(t *testing.T) {
	index := indexOfRelease(t, "1.28", "/?target-version=1.31", []string{"a storage.k8s.io/v1beta1 csistoragecapacities 1.27",
		"b flowcontrol.apiserver.k8s.io/v1beta3 flowschemas 1.32", "c flowcontrol.apiserver.k8s.io/v1beta2 flowschemas 1.29",
		"d flowcontrol.apiserver.k8s.io/v1beta2 flowschemas 1.29", "e resource.k8s.io/v1alpha2 resourceclaims 1.31"},
		weekly.Version{Major: 1, Minor: 29}, weekly.Version{Major: 1, Minor: 30}, weekly.Version{Major: 1, Minor: 31}, weekly.Version{Major: 1, Minor: 32})
	for _, want := range []string{
		`<span class="blocker-count">3</span> blockers for 1.31 (<span class="new-count">2</span> new, <span class="failing-count">1</span> failing now)`,
		`<p class="meta hops">On the way to 1.31, 1.30 removes nothing in use.</p>`,
		`<tr class="part"><th colspan="8">Breaks on the upgrade to 1.31 (removed after 1.28): 2. 1.29 removes 1</th></tr>`,
		`<tr class="part"><th colspan="8">1.31 removes 1</th></tr>`,
	} {
		if !strings.Contains(index, want) {
			t.Errorf("index: %q not in\n%.6000s", want, index)
		}
	}
	if i, j, k := strings.Index(index, "v1beta2"), strings.Index(index, "resourceclaims"), strings.Index(index, "csistoragecapacities"); i < 0 || j < i || k < j {
		t.Errorf("order: 1.29's at %d, 1.31's at %d, the failing one at %d", i, j, k)
	}
}

// indexOfRelease is the first screen (path) over findings of cluster prod, each "id
// group/version resource removed-in", an hour before consoleNow, its apiserver naming current,
// with the catalogue's releases given.
func indexOfRelease(t *testing.T, current, path string, findings []string, releases ...weekly.Version) string {
	t.Helper()
	_, st := chtest.ServerStore(t)
	ctx := context.Background()
	var fs []*auditlensv1.Finding
	for _, f := range findings {
		var id, gv, resource, removedIn string
		if _, err := fmt.Sscan(f, &id, &gv, &resource, &removedIn); err != nil {
			t.Fatal(err)
		}
		group, version, _ := strings.Cut(gv, "/")
		fs = append(fs, &auditlensv1.Finding{RuleId: "removed-api", Cluster: "prod", AuditId: id, EventTime: timestamppb.New(consoleNow.Add(-time.Hour)),
			ApiGroup: group, ApiVersion: version, Resource: resource, RemovedIn: removedIn, Username: "ci", UserAgent: "kubectl/v1.20.0"})
	}
	if err := st.WriteFindings(ctx, fs); err != nil {
		t.Fatal(err)
	}
	v, err := weekly.ParseVersion(current)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.WriteControlPlaneSightings(ctx, []store.ControlPlaneSighting{
		{Cluster: "prod", Component: "kube-apiserver", Version: v, Seen: consoleNow.Add(-2 * time.Hour)},
	}); err != nil {
		t.Fatal(err)
	}
	h := &Handler{DB: st.DB(), Cluster: "default", Releases: releases, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return consoleNow },
		Limits: testLimits}
	mux := http.NewServeMux()
	h.Register(mux)
	srv := httptest.NewServer(access.Loopback(mux))
	t.Cleanup(srv.Close)
	_, index := fetch(t, http.MethodGet, srv.URL+path)
	return index
}

// TestIndexNamesMigratedCallers: the callers that called the replacement after their last
// call of a blocker leave the blocker's counts and are named apart (escaped); when every
// caller moved, nothing blocks.
func TestIndexNamesMigratedCallers(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		seedConsole(t, st)
		srv := consoleServer(t, st)
		move := func(user, agent string) {
			t.Helper()
			if err := st.WriteMigrationSightings(context.Background(), []store.MigrationSighting{{Cluster: "prod", APIGroup: "extensions",
				APIVersion: "v1beta1", Resource: "ingresses", Username: user, UserAgent: agent, Seen: consoleNow.Add(time.Second)}}); err != nil {
				t.Fatal(err)
			}
		}
		index := func(want ...string) {
			t.Helper()
			_, body := fetch(t, http.MethodGet, srv.URL+"/")
			if strings.Contains(body, "<script>alert") {
				t.Error("a hostile value is not escaped")
			}
			for _, w := range want {
				if !strings.Contains(body, w) {
					t.Errorf("%q not in the index:\n%.6000s", w, body)
				}
			}
		}
		move("bob", "kubectl/v1.21.0 (linux/amd64)")
		index(`<span class="blocker-count">1</span> blocker for 1.25`, `<td class="n">60</td><td class="n"><a class="callers-link"`,
			`<span class="migrated-count">1</span> caller; <span class="mono"><span title="bob">bob</span></span>`,
			"off <code>extensions/v1beta1 ingresses</code> at "+day(0)+" 15:00:01Z")
		move("system:serviceaccount:ci:"+hostile, hostile)
		index(`<span class="blocker-count">0</span> blockers for 1.25`, `<span class="migrated-count">2</span> callers`, escapedHostile)
	})
}
