package page

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/access"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/store"
	"github.com/auditlens/auditlens/services/report/weekly"
)

// TestConsoleSharesOneRead: requests asking the same page while it is read share that read
// when their users are decided as the read's were (the same user, another allowed the same
// clusters); a user refused the cluster asked for reads alone at once, and one decided
// otherwise about a cluster the read looked at (the report's list of clusters, the first
// screen's) reads alone after it, so an answer never goes to a user it does not hold for.
func TestConsoleSharesOneRead(t *testing.T) {
	_, st := chtest.ServerStore(t)
	seedConsole(t, st)
	staging := &auditlensv1.Finding{RuleId: "removed-api", Cluster: "staging", AuditId: "staging-1",
		EventTime: timestamppb.New(consoleNow.Add(-time.Hour)), Verb: "list", RequestUri: "/apis/extensions/v1beta1/ingresses",
		ApiGroup: "extensions", ApiVersion: "v1beta1", Resource: "ingresses", Username: "stager", UserAgent: "kubectl/v1.21.0",
		SourceIp: "10.0.0.2", ResponseCode: 200, RemovedIn: "1.22", Replacement: "networking.k8s.io/v1"}
	if err := st.WriteFindings(context.Background(), []*auditlensv1.Finding{staging}); err != nil {
		t.Fatal(err)
	}
	// A read of a user in holds waits in its deadline (the first thing it does with its
	// slot) until the test closes the user's channel.
	var holds sync.Map
	h := &Handler{DB: st.DB(), Cluster: "prod", Releases: []weekly.Version{{Major: 1, Minor: 22}},
		Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return consoleNow }, Limits: Limits{MaxQueries: 2, QueryTimeout: time.Minute},
		Deadline: func(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
			id, _ := access.Identity(ctx)
			if ch, ok := holds.Load(id); ok {
				<-ch.(chan struct{})
			}
			return store.WithDeadline(ctx, d)
		}}
	mux := http.NewServeMux()
	h.Register(mux)
	// erin may read both clusters, bob nothing, the others prod; a request naming no user
	// is one the authorizer does not name, allowed everything.
	srv := httptest.NewServer(namedUsers(mux, func(user, cluster string) bool {
		return user == "erin" || (user != "bob" && cluster == "prod")
	}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(w, r.WithContext(access.WithAuthorizer(r.Context(), access.Everyone)))
	})))
	defer srv.Close()
	hold := func(user string) func() {
		ch := make(chan struct{})
		holds.Store(user, ch)
		var once sync.Once
		return func() { once.Do(func() { close(ch) }) }
	}
	get := func(user, path string) (int, string) {
		// A request that waits on a held read when it should not fails after 30 s.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		if user != "" {
			req.Header.Set(testUser, user)
		}
		resp, body := fetchReq(t, req)
		return resp.StatusCode, body
	}
	waitAsking := func(n int64) {
		t.Helper()
		for waited := time.Duration(0); h.asking.Load() < n; waited += 10 * time.Millisecond {
			if waited > time.Minute {
				t.Fatalf("%d requests asking after a minute, want %d", h.asking.Load(), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	type answer struct {
		code int
		body string
	}
	ask := func(wg *sync.WaitGroup, user, path string) *answer {
		a := &answer{}
		wg.Go(func() { a.code, a.body = get(user, path) })
		return a
	}

	// One cluster's page: alice's twelve requests and carol's share one read; bob, refused
	// prod, is answered at once beside it; a request of no named user, allowed staging too
	// (its page lists the clusters), waits for the read and then reads alone.
	letGo := hold("alice")
	defer letGo() // before the server closes: it waits for its requests
	const page, clients = "/report?cluster=prod&target-version=1.22", 12
	var wg sync.WaitGroup
	var alices []*answer
	for range clients {
		alices = append(alices, ask(&wg, "alice", page))
	}
	waitAsking(clients)
	if code, body := get("bob", page); code != http.StatusForbidden || strings.Contains(body, "extensions") {
		t.Errorf("bob, while alice's read is under way: %d %.200q", code, body)
	}
	carol, anyone := ask(&wg, "carol", page), ask(&wg, "", page)
	waitAsking(clients + 2)
	// alice's read holds one slot, the second is taken here: another page is refused at once.
	release, ok := h.admit()
	if !ok {
		t.Fatal("the second slot is taken")
	}
	if code, _ := get("alice", "/report?cluster=prod&target-version=1.25"); code != http.StatusServiceUnavailable {
		t.Errorf("alice asking another page past the bound: %d, want 503", code)
	}
	release()
	letGo()
	wg.Wait()
	for i, a := range append(alices, carol) {
		if a.code != http.StatusOK || a.body != alices[0].body || !strings.Contains(a.body, "extensions/v1beta1") || strings.Contains(a.body, "staging") {
			t.Errorf("request %d of the shared page: %d, %d bytes (the first %d)", i, a.code, len(a.body), len(alices[0].body))
		}
	}
	if anyone.code != http.StatusOK || !strings.Contains(anyone.body, "staging") {
		t.Errorf("the request of no named user: %d, names staging %v", anyone.code, strings.Contains(anyone.body, "staging"))
	}
	if n := h.Shared(); n < 1 || n > clients {
		t.Errorf("%d requests shared a read, want 1 (carol's) to %d", n, clients)
	}
	if n := h.asking.Load(); n != 0 {
		t.Errorf("%d requests still asking", n)
	}
	// Once the read is over, the next request reads again.
	before := h.Shared()
	if code, _ := get("alice", page); code != http.StatusOK || h.Shared() != before {
		t.Errorf("a request after the shared read: %d, shared %d -> %d", code, before, h.Shared())
	}

	// The first screen names no cluster: dora's read decides on prod and staging. frank,
	// decided as she is, shares it; erin, allowed staging too, waits for it and then reads
	// alone, and only she sees staging.
	before = h.Shared()
	letGo = hold("dora")
	defer letGo()
	dora := ask(&wg, "dora", "/")
	waitAsking(1)
	erin, frank := ask(&wg, "erin", "/"), ask(&wg, "frank", "/")
	waitAsking(3)
	letGo()
	wg.Wait()
	for who, a := range map[string]*answer{"dora": dora, "erin": erin, "frank": frank} {
		if a.code != http.StatusOK || !strings.Contains(a.body, "prod") || strings.Contains(a.body, "staging") != (who == "erin") {
			t.Errorf("%s's first screen: %d, names staging %v", who, a.code, strings.Contains(a.body, "staging"))
		}
	}
	if frank.body != dora.body {
		t.Error("frank's first screen is not dora's")
	}
	if n := h.Shared() - before; n != 1 {
		t.Errorf("%d requests shared dora's read, want 1 (frank's)", n)
	}
}

// testUser is the header that names the user of a test's or benchmark's request.
const testUser = "X-Test-User"

// namedUsers serves next to the requests whose testUser header names a user, as that user
// (access.WithIdentity), allowed the clusters allow says; the others go to unnamed. The
// console's listeners name the user from the loopback or the token.
func namedUsers(next http.Handler, allow func(user, cluster string) bool, unnamed http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user := r.Header.Get(testUser)
		if user == "" {
			unnamed.ServeHTTP(w, r)
			return
		}
		a := access.AuthorizerFunc(func(_ context.Context, cluster string) (bool, error) { return allow(user, cluster), nil })
		next.ServeHTTP(w, r.WithContext(access.WithIdentity(r.Context(), user, a)))
	})
}

// fetchReq sends req and reads its answer (an error fails t without stopping it: it runs
// in the test's goroutines).
func fetchReq(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return &http.Response{}, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}
