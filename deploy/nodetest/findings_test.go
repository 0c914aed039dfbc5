package nodetest

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const userAgent = "nodetest-legacy-client/1.0"

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// legacyClient is a ServiceAccount of a fresh namespace allowed to read the removed API groups
// and create pods there, as a client-go clientset that stamps every request with auditID(name).
type legacyClient struct {
	ns, sa string
	cfg    *rest.Config
}

func newLegacyClient(t *testing.T, c *kubernetes.Clientset, prefix string) *legacyClient {
	t.Helper()
	ctx := context.Background()
	ns := prefix + "-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	must(err)
	t.Cleanup(func() { _ = c.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	sa := "legacy-client"
	_, err = c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
	must(err)
	// Allowed, so the apiserver answers 404 (the API is gone) rather than 403.
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ns + "-legacy"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"extensions", "policy"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "create"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "delete"}},
	}}
	_, err = c.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
	must(err)
	t.Cleanup(func() { _ = c.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{}) })
	_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}},
	}, metav1.CreateOptions{})
	must(err)
	t.Cleanup(func() {
		_ = c.RbacV1().ClusterRoleBindings().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	tok, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authv1.TokenRequest{}, metav1.CreateOptions{})
	must(err)
	admin, err := restConfig()
	must(err)
	cfg := &rest.Config{Host: admin.Host, BearerToken: tok.Status.Token, UserAgent: userAgent,
		TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData, CAFile: admin.CAFile}, WarningHandler: rest.NoWarnings{}}
	return &legacyClient{ns: ns, sa: sa, cfg: cfg}
}

func (l *legacyClient) username() string { return "system:serviceaccount:" + l.ns + ":" + l.sa }

// auditID is the Audit-ID of one of our requests: the namespace keeps them unique per run.
func (l *legacyClient) auditID(name string) string { return l.ns + "-" + name }

func (l *legacyClient) as(name string) *kubernetes.Clientset {
	cfg := rest.CopyConfig(l.cfg)
	id := l.auditID(name)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			r = r.Clone(r.Context())
			r.Header.Set("Audit-ID", id)
			return rt.RoundTrip(r)
		})
	}
	return kubernetes.NewForConfigOrDie(cfg)
}

// finding is one stored (audit_id, rule_id) with its caller and how many rows the report's
// merged view (FINAL) holds for it.
type finding struct {
	username, userAgent string
	count               uint64
}

func storedFindings(db *sql.DB, ids []string) (map[string]finding, error) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	q := "SELECT audit_id, rule_id, any(username), any(user_agent), count() FROM auditlens.findings FINAL WHERE cluster = ? AND audit_id IN (" +
		strings.TrimSuffix(strings.Repeat("?,", len(ids)), ",") + ") GROUP BY audit_id, rule_id"
	rows, err := db.Query(q, append([]any{cluster}, args...)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	got := map[string]finding{}
	for rows.Next() {
		var id, rule string
		var f finding
		if err := rows.Scan(&id, &rule, &f.username, &f.userAgent, &f.count); err != nil {
			return nil, err
		}
		got[id+" "+rule] = f
	}
	return got, rows.Err()
}

// TestServiceAccountFindings: a ServiceAccount calls a removed API, a PodSecurityPolicy and
// creates a Pod selecting a beta node label, through client-go against the node's apiserver.
// The apiserver writes the events to its log (read by the ingest DaemonSet through hostPath)
// and posts them to the ingest-webhook Service; each finding must reach ClickHouse once, with
// the ServiceAccount and the user agent as its caller.
func TestServiceAccountFindings(t *testing.T) {
	need(t)
	ctx := context.Background()
	c := mustClient(t)
	l := newLegacyClient(t, c, "nodetest-findings")

	file0, webhook0, err := published(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	var code int
	l.as("removed-api").RESTClient().Get().AbsPath("/apis/extensions/v1beta1/namespaces/" + l.ns + "/deployments").Do(ctx).StatusCode(&code)
	if code != http.StatusNotFound {
		t.Fatalf("extensions/v1beta1 deployments: status %d, want 404", code)
	}
	psp := `{"apiVersion":"policy/v1beta1","kind":"PodSecurityPolicy","metadata":{"name":"` + l.ns + `"},"spec":{"privileged":false}}`
	l.as("psp").RESTClient().Post().AbsPath("/apis/policy/v1beta1/podsecuritypolicies").
		SetHeader("Content-Type", "application/json").Body([]byte(psp)).Do(ctx).StatusCode(&code)
	if code != http.StatusNotFound {
		t.Fatalf("policy/v1beta1 podsecuritypolicies: status %d, want 404", code)
	}
	_, err = l.as("beta-label").CoreV1().Pods(l.ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "beta-label"},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"beta.kubernetes.io/os": "linux"},
			Containers:   []corev1.Container{{Name: "app", Image: "auditlens.local/pause:1"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	want := map[string]string{ // audit id -> a rule it must give
		l.auditID("removed-api"): "removed-api",
		l.auditID("psp"):         "psp",
		l.auditID("beta-label"):  "beta-node-label",
	}
	ids := slices.Collect(func(yield func(string) bool) {
		for id := range want {
			if !yield(id) {
				return
			}
		}
	})

	db := clickhouse(t)
	var got map[string]finding
	waitFor(t, 120*time.Second, "the three findings in ClickHouse", func() (bool, error) {
		got, err = storedFindings(db, ids)
		if err != nil {
			return false, err
		}
		for id, rule := range want {
			if _, ok := got[id+" "+rule]; !ok {
				return false, fmt.Errorf("%s %s missing (have %d)", id, rule, len(got))
			}
		}
		return true, nil
	})
	// Both inputs saw the requests: each published more events than before (ours and the
	// controllers'), well past the point where ours were found.
	var file1, webhook1 float64
	waitFor(t, 60*time.Second, "both the file and the webhook input to publish our events", func() (bool, error) {
		file1, webhook1, err = published(ctx, c)
		return err == nil && file1 >= file0+3 && webhook1 >= webhook0+3, err
	})
	stableFindings(t, db, ids)
	t.Logf("events published: file %v -> %v, webhook %v -> %v", file0, file1, webhook0, webhook1)
	if got, err = storedFindings(db, ids); err != nil {
		t.Fatal(err)
	}
	for key, f := range got {
		if f.count != 1 {
			t.Errorf("%s: stored %d times, want once", key, f.count)
		}
		if f.username != l.username() || f.userAgent != userAgent {
			t.Errorf("%s: caller %q (%q), want %q (%q)", key, f.username, f.userAgent, l.username(), userAgent)
		}
	}
	t.Logf("findings: %v", got)
}

// stableFindings waits until the stored findings of ids stop changing (ten polls alike), so a
// duplicate from the slower input would be counted.
func stableFindings(t *testing.T, db *sql.DB, ids []string) {
	t.Helper()
	last, same := "", 0
	waitFor(t, 60*time.Second, "the findings to stop changing", func() (bool, error) {
		got, err := storedFindings(db, ids)
		if err != nil {
			return false, err
		}
		now := fmt.Sprint(got)
		if now == last {
			same++
		} else {
			last, same = now, 0
		}
		return same >= 10, nil
	})
}

// nodeName is the node deploy/node registers.
const nodeName = "auditlens-node"

// cgroup2Magic is the file system type of /sys/fs/cgroup on a host with the unified hierarchy.
const cgroup2Magic = 0x63677270

// cgroupV1Host reports whether this host (and so the node's kubelet) runs on cgroup v1: a
// legacy or hybrid hierarchy.
func cgroupV1Host(t *testing.T) bool {
	t.Helper()
	var fs syscall.Statfs_t
	if err := syscall.Statfs("/sys/fs/cgroup", &fs); err != nil {
		t.Fatal(err)
	}
	return fs.Type != cgroup2Magic
}

// TestKubeletCgroupV1: the node's own kubelet reports at start, as a Warning event, that it
// runs on cgroup v1 (a hybrid or legacy hierarchy, as on this project's machines, started with
// failCgroupV1: false); the audit policy logs that event's body, and the node-cgroup-v1 finding
// names the node with the kubelet as its caller. On a host with cgroup v2 the kubelet writes no
// such event, and no finding may appear.
func TestKubeletCgroupV1(t *testing.T) {
	need(t)
	v1 := cgroupV1Host(t)
	db := clickhouse(t)
	user := "system:node:" + nodeName
	q := "SELECT count(), any(user_agent), any(message) FROM auditlens.findings FINAL WHERE cluster = ? AND rule_id = 'node-cgroup-v1' AND username = ?"
	var n uint64
	var agent, message string
	if !v1 {
		// The kubelet wrote its start-up events long before: other tests' findings are stored.
		if err := db.QueryRow(q, cluster, user).Scan(&n, &agent, &message); err != nil || n != 0 {
			t.Fatalf("cgroup v2 host: %d node-cgroup-v1 findings (%v): %s", n, err, message)
		}
		return
	}
	waitFor(t, 120*time.Second, "the node-cgroup-v1 finding of the node's kubelet", func() (bool, error) {
		err := db.QueryRow(q, cluster, user).Scan(&n, &agent, &message)
		return err == nil && n > 0, err
	})
	if n != 1 || !strings.HasPrefix(agent, "kubelet/") || !strings.Contains(message, "Node "+nodeName+" runs its kubelet on cgroup v1") {
		t.Errorf("node-cgroup-v1: %d findings, agent %q, message %q", n, agent, message)
	}
}
