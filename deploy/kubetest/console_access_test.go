package kubetest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/auditlens/auditlens/deploy/kubetest/kubeapiserver"
	"github.com/auditlens/auditlens/services/report/access"
)

// TestConsoleAccessThroughTheAPIServer: the console's authenticated listener asks a real
// kube-apiserver, as the report's own identity (bound to system:auth-delegator), who a
// bearer token is (TokenReview) and whether that user may get auditlens.io/console of the
// cluster asked for (SubjectAccessReview). One ServiceAccount is granted cluster "prod" by
// a ClusterRole, another nothing; a request without a token or with a forged one is refused.
func TestConsoleAccessThroughTheAPIServer(t *testing.T) {
	const reviewerToken = "auditlens-report-reviewer-token"
	s := kubeapiserver.Start(t, kubeapiserver.Options{Tokens: []string{reviewerToken + `,auditlens-report,auditlens-report-uid,""`}})
	ctx := context.Background()
	kc, err := kubernetes.NewForConfig(s.Config(nil))
	if err != nil {
		t.Fatal(err)
	}
	ns := "auditlens"
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	for _, sa := range []string{"team-a", "team-b"} {
		must(kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}))
	}
	// What deploy/kubernetes grants the report: reviewing tokens and access.
	must(kc.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "auditlens-report-auth-delegator"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:auth-delegator"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "auditlens-report"}},
	}, metav1.CreateOptions{}))
	// What a team is granted: the console of its cluster.
	must(kc.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "auditlens-console-prod"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{access.Group}, Resources: []string{access.Resource}, ResourceNames: []string{"prod"}, Verbs: []string{access.Verb}}},
	}, metav1.CreateOptions{}))
	must(kc.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "auditlens-console-prod-team-a"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "auditlens-console-prod"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "team-a", Namespace: ns}},
	}, metav1.CreateOptions{}))
	token := func(sa string, audiences ...string) string {
		tr, err := kc.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: audiences}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	// Console tokens are minted for the console's audience (kubectl create token team-a
	// --audience auditlens-console); a token for the apiserver is not one.
	teamA, teamB := token("team-a", access.DefaultAudience), token("team-b", access.DefaultAudience)
	teamAForTheAPIServer := token("team-a")

	// The report's one client configuration (--report-kube-*): its own identity.
	rc := &rest.Config{Host: s.URL, BearerToken: reviewerToken, TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(s.Dir, "certs", "apiserver.crt")}}
	cfg := access.DefaultKubeConfig()
	cfg.ReviewsPerSecond = 5
	k, err := access.NewKube(rc, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The console's pages ask access.Allowed for the cluster they show.
	srv := httptest.NewServer(k.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cluster := r.URL.Query().Get("cluster")
		ok, err := access.Allowed(r.Context(), cluster)
		switch {
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		case !ok:
			http.Error(w, "forbidden", http.StatusForbidden)
		default:
			fmt.Fprintf(w, "console of %s", cluster)
		}
	})))
	defer srv.Close()

	for _, c := range []struct {
		name, token, cluster string
		want                 int
	}{
		{"allowed service account, its cluster", teamA, "prod", http.StatusOK},
		{"allowed service account, another cluster", teamA, "staging", http.StatusForbidden},
		{"service account without the rule", teamB, "prod", http.StatusForbidden},
		{"no token", "", "prod", http.StatusUnauthorized},
		{"forged token", teamA[:len(teamA)-4] + "AAAA", "prod", http.StatusUnauthorized},
		// review 3 E13: the audience is checked, so an apiserver credential is no console one.
		{"allowed service account's token for the apiserver", teamAForTheAPIServer, "prod", http.StatusUnauthorized},
		{"static admin token (the apiserver's audience only)", kubeapiserver.AdminToken, "prod", http.StatusUnauthorized},
		// review 3 E8: a token longer than any real one is refused without a review.
		{"a 256 KiB token", strings.Repeat("A", 256<<10), "prod", http.StatusUnauthorized},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/report?cluster="+c.cluster, nil)
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.want, body)
			}
			if c.want == http.StatusOK && !strings.Contains(string(body), "console of prod") {
				t.Fatalf("body %q lacks the console", body)
			}
			if c.want != http.StatusOK && strings.Contains(string(body), "console of") {
				t.Fatalf("a refused request got console content: %q", body)
			}
			if c.want == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
		})
	}

	// review 3 E8: a client sending new tokens as fast as it can gets 429s past
	// ReviewsPerSecond (5/s, a burst of 10), and the apiserver sees at most that many
	// reviews; a reader whose token was reviewed is served from the cache meanwhile.
	get := func(tok string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/report?cluster=prod", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	sentBefore, _ := k.Reviews()
	began := time.Now()
	codes := map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for c := range 8 { // eight connections at once, 25 new tokens each
		wg.Go(func() {
			for i := range 25 {
				code := get(fmt.Sprintf("random-token-%d-%d-%s", c, i, strings.Repeat("x", 900)))
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(began)
	sent, refused := k.Reviews()
	sent -= sentBefore
	t.Logf("200 new tokens in %s: answers %v, %d reviews sent, %d refused", elapsed.Round(time.Millisecond), codes, sent, refused)
	if limit := 10 + uint64(5*elapsed.Seconds()) + 1; sent > limit {
		t.Errorf("%d TokenReviews for 200 new tokens in %s: want at most %d", sent, elapsed, limit)
	}
	if codes[http.StatusTooManyRequests] == 0 || codes[http.StatusOK] != 0 {
		t.Errorf("answers %v: want 429s past the bound, 401s within it, no 200", codes)
	}
	if code := get(teamA); code != http.StatusOK {
		t.Errorf("a reviewed reader during the flood: %d, want 200 (from the cache)", code)
	}
}
