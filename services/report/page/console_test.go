package page

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/access"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/store"
	"github.com/auditlens/auditlens/services/report/weekly"
)

// consoleNow is a Wednesday: this week began Monday 2026-11-30, the last full week is empty.
var consoleNow = time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)

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

func consoleServer(t *testing.T, st *store.Store) *httptest.Server {
	h := &Handler{DB: st.DB(), Cluster: "default", DefaultTarget: weekly.Version{Major: 1, Minor: 33},
		Releases: []weekly.Version{{Major: 1, Minor: 16}, {Major: 1, Minor: 22}, {Major: 1, Minor: 25}},
		Log:      slog.New(slog.DiscardHandler), Now: func() time.Time { return consoleNow }}
	mux := http.NewServeMux()
	h.Register(mux)
	srv := httptest.NewServer(access.Loopback(mux))
	t.Cleanup(srv.Close)
	return srv
}

func fetch(t *testing.T, method, u string) (*http.Response, string) {
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
		index := get("/", `<tr class="cluster"><td><a class="report-link" href="/report?cluster=prod&amp;target-version=1.33">`, "week ending 2026-12-06: ",
			`<td class="n">61</td><td class="n">0</td><td class="n">1</td><td>2026-12-02 15:00:00Z</td>`,
			`<a class="blocker-week" href="/report?cluster=prod&amp;target-version=1.33&amp;week-ending=2026-12-06">2026-12-02 15:00:00Z</a>`, `<option value="1.33" selected>`, `<option value="1.16">`)
		if strings.Contains(index, "1.21") {
			t.Error("the index offers a target version that no release names")
		}
		// The report without a week: the last full week is empty, so this week so far.
		get("/report?cluster=prod&target-version=1.22", "Showing this week so far: the last full week has no findings.",
			`<option value="2026-12-06" selected>2026-11-30 to 2026-12-06 (this week so far)</option>`,
			`<a class="callers-link" href="/callers?cluster=prod&amp;group=extensions&amp;resource=ingresses&amp;rule=removed-api&amp;target-version=1.22&amp;version=v1beta1&amp;week-ending=2026-12-06">`,
			`href="/report?cluster=prod&amp;format=csv&amp;target-version=1.22&amp;week-ending=2026-12-06"`, `form id="controls"`)
		get("/report?cluster=prod&target-version=1.22&week-ending=2026-11-29", "Showing the last full week.", `id="no-blockers"`)
		scope := "cluster=prod&target-version=1.22&week-ending=2026-12-06"
		key := "&rule=removed-api&group=extensions&version=v1beta1&resource=ingresses"
		get("/callers?"+scope+key, `<td class="n">60</td>`, `<td class="n">1</td>`, "system:serviceaccount:ci:"+escapedHostile)
		caller := "&user=" + url.QueryEscape("system:serviceaccount:ci:"+hostile) + "&agent=" + url.QueryEscape(hostile) + "&ip=10.0.0.1"
		first := get("/requests?"+scope+key+caller, `id="next"`, "Rows 1 to 50.")
		if n := strings.Count(first, `<tr class="request">`); n != 50 {
			t.Errorf("first page of requests: %d rows, want 50", n)
		}
		second := get("/requests?"+scope+key+caller+"&offset=50", `id="prev"`, "Rows 51 to 60.")
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
	scope := "cluster=prod&target-version=1.22&week-ending=2026-12-06"
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
	if _, body := fetch(t, http.MethodGet, srv.URL+"/"); !strings.Contains(body,
		`<a class="blocker-week" href="/report?cluster=sample&amp;target-version=1.33&amp;week-ending=2019-01-06">2019-01-02 15:01:16Z</a>`) {
		t.Errorf("index: no link to the week of the newest blocker use:\n%.3000s", body)
	}
}
