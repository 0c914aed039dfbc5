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

	"github.com/auditlens/auditlens/services/report/access"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/store"
	"github.com/auditlens/auditlens/services/report/weekly"
)

// TestConsoleSharesOneRead: requests asking the same page of the same user while it is read
// share that read; another user's request, or one of no named user, reads alone (and past
// the bound gets 503), so an answer never goes to a user it was not read for.
func TestConsoleSharesOneRead(t *testing.T) {
	_, st := chtest.ServerStore(t)
	seedConsole(t, st)
	// A read of alice's waits in its deadline (the first thing it does with its slot) until
	// the test lets it go.
	hold := make(chan struct{})
	var letGo sync.Once
	h := &Handler{DB: st.DB(), Cluster: "prod", Releases: []weekly.Version{{Major: 1, Minor: 22}},
		Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return consoleNow }, Limits: Limits{MaxQueries: 2, QueryTimeout: time.Minute},
		Deadline: func(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
			if id, _ := access.Identity(ctx); id == "alice" {
				<-hold
			}
			return store.WithDeadline(ctx, d)
		}}
	mux := http.NewServeMux()
	h.Register(mux)
	// alice may read prod, bob nothing; a request naming no user is one the authorizer does
	// not name.
	srv := httptest.NewServer(namedUsers(mux, func(user, cluster string) bool { return user == "alice" && cluster == "prod" },
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mux.ServeHTTP(w, r.WithContext(access.WithAuthorizer(r.Context(), access.Everyone)))
		})))
	defer srv.Close()
	defer letGo.Do(func() { close(hold) }) // before the server closes: it waits for its requests
	get := func(user, path string) (int, string) {
		// A request that waits on alice's held read when it should not fails after 30 s.
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
	const page, clients = "/report?cluster=prod&target-version=1.22", 12
	var wg sync.WaitGroup
	codes, bodies := make([]int, clients), make([]string, clients)
	for i := range clients {
		wg.Go(func() { codes[i], bodies[i] = get("alice", page) })
	}
	for waited := time.Duration(0); h.asking.Load() < clients; waited += 10 * time.Millisecond {
		if waited > time.Minute {
			t.Fatalf("%d requests asking after a minute, want %d", h.asking.Load(), clients)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// alice's read holds one slot: bob asking the same page reads alone, with the other,
	// and is refused prod; then the second slot is held by a request of no named user, so
	// one more of that user is refused at once.
	if code, body := get("bob", page); code != http.StatusForbidden || strings.Contains(body, "extensions") {
		t.Errorf("bob, while alice's read is under way: %d %.200q", code, body)
	}
	release, ok := h.admit()
	if !ok {
		t.Fatal("the second slot is taken")
	}
	if code, _ := get("", page); code != http.StatusServiceUnavailable {
		t.Errorf("a request of no named user past the bound: %d, want 503", code)
	}
	if code, _ := get("alice", "/report?cluster=prod&target-version=1.25"); code != http.StatusServiceUnavailable {
		t.Errorf("alice asking another page past the bound: %d, want 503", code)
	}
	release()
	letGo.Do(func() { close(hold) })
	wg.Wait()
	for i := range clients {
		if codes[i] != http.StatusOK || bodies[i] != bodies[0] || !strings.Contains(bodies[i], "extensions/v1beta1") {
			t.Errorf("alice's request %d: %d, %d bytes (the first %d)", i, codes[i], len(bodies[i]), len(bodies[0]))
		}
	}
	if n := h.Shared(); n < 1 || n > clients-1 {
		t.Errorf("%d requests shared a read, want 1 to %d", n, clients-1)
	}
	if n := h.asking.Load(); n != 0 {
		t.Errorf("%d requests still asking", n)
	}
	// Once the read is over, the next request reads again.
	before := h.Shared()
	if code, _ := get("alice", page); code != http.StatusOK || h.Shared() != before {
		t.Errorf("a request after the shared read: %d, shared %d -> %d", code, before, h.Shared())
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
