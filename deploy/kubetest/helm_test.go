package kubetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/auditlens/auditlens/deploy/kubetest/kubeapiserver"
	"github.com/auditlens/auditlens/lib/kubeversion"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/classify/manifests"
	"github.com/auditlens/auditlens/services/classify/rules"
)

// helmManifest is a chart's rendered manifest: a removed Ingress, a PodSecurityPolicy, and
// objects of served apiVersions.
const helmManifest = `---
# Source: web/templates/ingress.yaml
apiVersion: extensions/v1beta1
kind: Ingress
metadata: {name: web, namespace: shop}
spec: {rules: [{host: shop.example}]}
---
# Source: web/templates/psp.yaml
apiVersion: policy/v1beta1
kind: PodSecurityPolicy
metadata: {name: web}
spec: {privileged: false}
---
# Source: web/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx}]}
`

// TestHelmLiveReleases: Helm 3 release storage created in a real kube-apiserver (release
// Secrets of three revisions, a ConfigMap release in another namespace, a Secret that is no
// release) is read by classify manifests --helm-live through a kubeconfig: the latest
// deployed revision of each release gives the Ingress and the PodSecurityPolicy findings,
// named after the release, and nothing for its apps/v1 objects; older revisions only with
// --helm-all-revisions. The same Secrets printed as the List of kubectl get -o json give the
// same findings through a file.
func TestHelmLiveReleases(t *testing.T) {
	srv := kubeapiserver.Start(t, kubeapiserver.Options{})
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(srv.Config(nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"shop", "tools"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cronJob := "apiVersion: batch/v1beta1\nkind: CronJob\nmetadata: {name: nightly}\n"
	labels := func(name string, rev int, status string) map[string]string {
		return map[string]string{"owner": "helm", "name": name, "status": status, "version": strconv.Itoa(rev)}
	}
	encode := func(name, ns string, rev int, status, manifest string) string {
		enc, err := manifests.EncodeRelease(manifests.NewRelease(name, ns, rev, status, name, "1.2.3", manifest))
		if err != nil {
			t.Fatal(err)
		}
		return enc
	}
	for _, r := range []struct {
		rev      int
		status   string
		manifest string
	}{{1, "superseded", cronJob}, {2, "deployed", helmManifest}, {3, "failed", cronJob}} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sh.helm.release.v1.web.v" + strconv.Itoa(r.rev), Namespace: "shop",
			Labels: labels("web", r.rev, r.status)}, Type: manifests.HelmSecretType,
			Data: map[string][]byte{"release": []byte(encode("web", "shop", r.rev, r.status, r.manifest))}}
		if _, err := cs.CoreV1().Secrets("shop").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "sh.helm.release.v1.cron.v1", Namespace: "tools", Labels: labels("cron", 1, "deployed")},
		Data: map[string]string{"release": encode("cron", "tools", 1, "deployed", cronJob)}}
	if _, err := cs.CoreV1().ConfigMaps("tools").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop", Labels: map[string]string{"owner": "helm"}},
		Data: map[string][]byte{"password": []byte("x")}}
	if _, err := cs.CoreV1().Secrets("shop").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	kc := "apiVersion: v1\nkind: Config\nclusters: [{name: test, cluster: {server: \"" + srv.URL + "\", insecure-skip-tls-verify: true}}]\n" +
		"users: [{name: admin, user: {token: " + kubeapiserver.AdminToken + "}}]\n" +
		"contexts: [{name: test, context: {cluster: test, user: admin}}]\ncurrent-context: test\n"
	if err := os.WriteFile(kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	web := "secret shop/sh.helm.release.v1.web.v2 helm release shop/web revision 2 (chart web-1.2.3)"
	cron := "configmap tools/sh.helm.release.v1.cron.v1 helm release tools/cron revision 1 (chart cron-1.2.3)"
	want := []string{cron + "#1 removed-api", web + "#1 removed-api", web + "#2 psp"}
	got, errOut, code := runManifests(t, "", "--helm-live", "--kubeconfig", kubeconfig)
	if code != 3 || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("--helm-live: exit %d, findings:\n%s\nwant:\n%s\nstderr: %s", code, strings.Join(got, "\n"), strings.Join(want, "\n"), errOut)
	}
	if !strings.Contains(errOut, "2 Helm releases read from the cluster") || !strings.Contains(errOut, "2 older Helm revisions left out") {
		t.Errorf("summary: %s", errOut)
	}
	// The release judged is the cluster's own (its /version), the target the one after it: the
	// CronJob and PodSecurityPolicy (removed in 1.25) and the Ingress (1.22) fail there today.
	minor := kubeversion.MustParse(kubeapiserver.Version)
	release := "the cluster runs " + minor.String() + ": the apiserver's /version (" + kubeapiserver.Version + ")"
	blocking := fmt.Sprintf("3 blocking an upgrade from %s to %s (0 new in %s, 3 failing now", minor, minor.Next(), minor.Next())
	if !strings.Contains(errOut, release) || !strings.Contains(errOut, blocking) {
		t.Errorf("summary: %s\nwant %q and %q", errOut, release, blocking)
	}
	if _, errOut, _ := runManifests(t, "", "--helm-live", "--kubeconfig", kubeconfig, "--current-version", "1.30"); !strings.Contains(errOut, "from 1.30 to 1.31") || strings.Contains(errOut, "/version") {
		t.Errorf("--current-version is the release judged, not /version: %s", errOut)
	}
	// One object per page: the pages are followed to the end.
	cat, err := rules.Load()
	if err != nil {
		t.Fatal(err)
	}
	c := &manifests.Checker{Engine: rules.NewEngine(cat)}
	var paged []string
	releases, _, errs := c.CheckLive(ctx, manifests.LiveConfig{Kubeconfig: kubeconfig, PageSize: 1}, func(source string, f *auditlensv1.Finding) {
		paged = append(paged, source+" "+f.RuleId)
	})
	sort.Strings(paged)
	if releases != 2 || len(errs) != 0 || strings.Join(paged, "\n") != strings.Join(want, "\n") {
		t.Errorf("page size 1: %d releases, %v, findings:\n%s", releases, errs, strings.Join(paged, "\n"))
	}
	got, _, _ = runManifests(t, "", "--helm-live", "--kubeconfig", kubeconfig, "--helm-all-revisions", "--helm-namespace", "shop")
	if len(got) != 4 || !strings.Contains(strings.Join(got, "\n"), "revision 3 (chart web-1.2.3)#1 removed-api") {
		t.Errorf("--helm-all-revisions in shop: %s", strings.Join(got, "\n"))
	}

	// What kubectl get secrets -A -l owner=helm -o json prints, through stdin.
	secrets, err := cs.CoreV1().Secrets("").List(ctx, metav1.ListOptions{LabelSelector: "owner=helm"})
	if err != nil {
		t.Fatal(err)
	}
	list := map[string]any{"apiVersion": "v1", "kind": "List", "items": []any{}}
	for _, s := range secrets.Items {
		s.APIVersion, s.Kind = "v1", "Secret"
		b, _ := json.Marshal(s)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		list["items"] = append(list["items"].([]any), m)
	}
	b, _ := json.Marshal(list)
	got, errOut, code = runManifests(t, string(b), "-")
	if code != 3 || len(got) != 2 || !strings.Contains(got[0], "helm release shop/web revision 2 (chart web-1.2.3)#1 removed-api") {
		t.Errorf("List: exit %d, %s\n%s", code, strings.Join(got, "\n"), errOut)
	}
}

// runManifests runs classify manifests in-process: the findings as "SOURCE RULE", sorted.
func runManifests(t *testing.T, stdin string, args ...string) ([]string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := manifests.Main(args, strings.NewReader(stdin), &out, &errOut)
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if line == "" {
			continue
		}
		var f manifests.Finding
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if f.Resource == "deployments" {
			t.Errorf("a finding for the apps/v1 Deployment: %s", line)
		}
		got = append(got, f.Source+" "+f.RuleID)
	}
	sort.Strings(got)
	return got, errOut.String(), code
}
