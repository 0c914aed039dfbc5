package kubetest

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/auditlens/auditlens/deploy/kubetest/kubeapiserver"
)

// TestChartInstallsTwice installs the chart into a real kube-apiserver with Helm itself (its
// ownership checks are what refuses a release that would take over another's object): the
// self-managed preset with the console and the readiness gate, as the release "auditlens" (the
// names of deploy/kubernetes) and as "audit-b" (every object named audit-b-auditlens-*) in one
// namespace, then as "audit-c" in another. They install and share no object; each workload
// selects only its own release's pods; the file ingests run in namespaces and node directories
// of their own; the UpgradeReadiness CRD is installed once, by the first, and stays when the
// first is uninstalled, while the second's objects stay untouched.
func TestChartInstallsTwice(t *testing.T) {
	s := kubeapiserver.Start(t, kubeapiserver.Options{})
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "auditlens"
	config := func(ns string) *action.Configuration {
		url, token, insecure, namespace := s.URL, kubeapiserver.AdminToken, true, ns
		flags := &genericclioptions.ConfigFlags{APIServer: &url, BearerToken: &token, Insecure: &insecure, Namespace: &namespace}
		cfg := &action.Configuration{}
		if err := cfg.Init(flags, ns, "secret", t.Logf); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	values := func(cluster string) map[string]any {
		v := presetValues(t, "self-managed")
		maps.Copy(v, map[string]any{"cluster": map[string]any{"name": cluster}, "console": map[string]any{"enabled": true}})
		return v
	}
	install := func(name, cluster, ns string) *release.Release {
		t.Helper()
		inst := action.NewInstall(config(ns))
		inst.ReleaseName, inst.Namespace, inst.CreateNamespace = name, ns, true
		rel, err := inst.Run(ch, values(cluster))
		if err != nil {
			t.Fatalf("helm install %s: %v", name, err)
		}
		return rel
	}
	first, second := install("auditlens", "prod", ns), install("audit-b", "staging", ns)

	objects := func(rel *release.Release) map[string]*unstructured.Unstructured {
		out := map[string]*unstructured.Unstructured{}
		for _, m := range releaseutil.SplitManifests(rel.Manifest) {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(m), &u.Object); err != nil {
				t.Fatal(err)
			}
			if u.Object == nil {
				continue
			}
			ns := u.GetNamespace()
			if ns == "" && u.GetKind() != "Namespace" && !strings.HasPrefix(u.GetKind(), "Cluster") && u.GetKind() != "CustomResourceDefinition" {
				ns = rel.Namespace
			}
			out[fmt.Sprintf("%s %s/%s", u.GetKind(), ns, u.GetName())] = u
		}
		return out
	}
	a, b := objects(first), objects(second)
	for id := range b {
		if _, ok := a[id]; ok {
			t.Errorf("both releases have %s", id)
		}
	}
	crd := "CustomResourceDefinition /upgradereadinesses.auditlens.io"
	if _, ok := a[crd]; !ok {
		t.Errorf("the first release does not install the CRD")
	}
	for _, want := range []string{"Deployment auditlens/report", "DaemonSet auditlens-ingest/ingest", "ClusterRole /auditlens-console-reader",
		"Deployment auditlens/audit-b-auditlens-report", "DaemonSet audit-b-auditlens-ingest/audit-b-auditlens-ingest",
		"ClusterRole /audit-b-auditlens-console-reader", "ClusterRoleBinding /audit-b-auditlens-report-readiness"} {
		if _, ok := a[want]; !ok {
			if _, ok := b[want]; !ok {
				t.Errorf("no release has %s", want)
			}
		}
	}
	for _, rel := range []struct {
		name, checkpoints string
		objs              map[string]*unstructured.Unstructured
	}{{"auditlens", "/var/lib/auditlens/checkpoints", a}, {"audit-b", "/var/lib/auditlens/audit-b-auditlens/checkpoints", b}} {
		for id, o := range rel.objs {
			switch o.GetKind() {
			case "Deployment", "DaemonSet", "StatefulSet":
				sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
				pod, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels")
				if sel["app.kubernetes.io/instance"] != rel.name || pod["app.kubernetes.io/instance"] != rel.name {
					t.Errorf("%s of %s: selector %v, pod labels %v", id, rel.name, sel, pod)
				}
			case "Service", "PodDisruptionBudget":
				path := []string{"spec", "selector"}
				if o.GetKind() == "PodDisruptionBudget" {
					path = append(path, "matchLabels")
				}
				if sel, _, _ := unstructured.NestedStringMap(o.Object, path...); sel["app.kubernetes.io/instance"] != rel.name {
					t.Errorf("%s of %s selects %v", id, rel.name, sel)
				}
			}
			if o.GetKind() == "DaemonSet" {
				vols, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
				if !strings.Contains(fmt.Sprint(vols), "path:"+rel.checkpoints) {
					t.Errorf("%s of %s: checkpoints not at %s: %v", id, rel.name, rel.checkpoints, vols)
				}
			}
		}
	}

	// Uninstalling the first keeps the CRD (the second's gate writes its objects there) and
	// leaves the second's objects alone.
	if _, err := action.NewUninstall(config(ns)).Run("auditlens"); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(s.Config(nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got, err := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).
		Get(ctx, "upgradereadinesses.auditlens.io", metav1.GetOptions{})
	if err != nil || got.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
		t.Errorf("the CRD after the first release's uninstall: %v %v", err, got.GetAnnotations())
	}
	if _, err := dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}).Namespace(ns).
		Get(ctx, "audit-b-auditlens-report", metav1.GetOptions{}); err != nil {
		t.Errorf("the second release's report after the first's uninstall: %v", err)
	}
	// A third release, in a namespace of its own, installed now does not take the kept CRD
	// over, and shares no object with the second.
	third := objects(install("audit-c", "dev", "team-c"))
	if third[crd] != nil {
		t.Errorf("a third release renders the CRD another release installed")
	}
	for id := range third {
		if _, ok := b[id]; ok {
			t.Errorf("the releases in two namespaces both have %s", id)
		}
	}
}
