package kubetest

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/auditlens/auditlens/deploy/kubetest/kubeapiserver"
	"github.com/auditlens/auditlens/deploy/render"
)

// warnings collects the Warning headers the apiserver answers with (Pod Security warnings,
// deprecated APIs, unknown fields).
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(code int, agent, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.list
	w.list = nil
	return l
}

type applier struct {
	t      *testing.T
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func (a *applier) apply(obj *unstructured.Unstructured, dryRun bool) error {
	gvk := obj.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return err
	}
	var r dynamic.ResourceInterface = a.dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		r = a.dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
	}
	opts := metav1.ApplyOptions{FieldManager: "auditlens-test", Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = r.Apply(context.Background(), obj.GetName(), obj, opts)
	return err
}

func newApplier(t *testing.T, s *kubeapiserver.Server, w *warnings) *applier {
	cfg := s.Config(w)
	disco := discovery.NewDiscoveryClientForConfigOrDie(cfg)
	return &applier{t: t, dyn: dynamic.NewForConfigOrDie(cfg), mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))}
}

func decodeAll(t *testing.T, path string) []*unstructured.Unstructured {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(string(b), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
	return out
}

// testCluster is the cluster name the tests give the overlays (and the chart's presets).
const testCluster = "test-cluster"

// renderKustomization renders dir under root as an installer would: the base as it is, an
// overlay with the cluster's name given.
func renderKustomization(root, dir string) ([]*unstructured.Unstructured, error) {
	if dir == "base" {
		return render.Build(filepath.Join(root, dir))
	}
	return render.BuildWithCluster(root, dir, testCluster)
}

// TestKustomizationsApplyToARealAPIServer applies every kustomization, as rendered by kustomize,
// server-side to a real kube-apiserver (after the monitoring component's CRDs): every object must be
// accepted with no warning at all, Pod Security warnings included.
func TestKustomizationsApplyToARealAPIServer(t *testing.T) {
	s := kubeapiserver.Start(t, kubeapiserver.Options{})
	w := &warnings{}
	a := newApplier(t, s, w)

	applyMonitoringCRDs(t, a, w)

	root := filepath.Join("..", "kubernetes")
	dirs, err := render.Kustomizations(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 5 {
		t.Fatalf("only %v", dirs)
	}
	for _, dir := range dirs {
		objs, err := renderKustomization(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		// Namespaces first, as kubectl apply orders them.
		sort.SliceStable(objs, func(i, j int) bool { return objs[i].GetKind() == "Namespace" && objs[j].GetKind() != "Namespace" })
		for _, obj := range objs {
			id := dir + ": " + obj.GetKind() + " " + obj.GetNamespace() + "/" + obj.GetName()
			if err := a.apply(obj, false); err != nil {
				t.Errorf("%s: %v", id, err)
			}
			if l := w.take(); len(l) > 0 {
				t.Errorf("%s: warnings %q", id, l)
			}
		}
		t.Logf("%s: %d objects applied", dir, len(objs))
	}
}

// TestIngestNeedsPrivileged asks the real apiserver which Pod Security level the ingest
// DaemonSet's pods need: baseline rejects them (hostPath), privileged admits them. That is why
// they live in a namespace of their own.
func TestIngestNeedsPrivileged(t *testing.T) {
	s := kubeapiserver.Start(t, kubeapiserver.Options{})
	w := &warnings{}
	cs := kubernetes.NewForConfigOrDie(s.Config(w))
	objs, err := renderKustomization(filepath.Join("..", "kubernetes"), "overlays/self-managed")
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	for _, o := range objs {
		if o.GetKind() == "DaemonSet" {
			tmpl, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "template")
			b, _ := yaml.Marshal(tmpl)
			if err := yaml.UnmarshalStrict(b, &pod); err != nil {
				t.Fatal(err)
			}
		}
	}
	pod.Name = "ingest-probe"
	pod.Spec.ServiceAccountName = ""
	ctx := context.Background()
	for level, admitted := range map[string]bool{"restricted": false, "baseline": false, "privileged": true} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "probe-" + level,
			Labels: map[string]string{"pod-security.kubernetes.io/enforce": level}}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// No controller manager creates the default service account, which pods are admitted with.
		if _, err := cs.CoreV1().ServiceAccounts(ns.Name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := pod.DeepCopy()
		p.Namespace = ns.Name
		_, err := cs.CoreV1().Pods(ns.Name).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case admitted && err != nil:
			t.Errorf("%s: ingest pod rejected: %v", level, err)
		case !admitted && (err == nil || !strings.Contains(err.Error(), "hostPath")):
			t.Errorf("%s: ingest pod not rejected for its hostPath volumes: %v", level, err)
		default:
			t.Logf("%s: %v", level, err)
		}
	}
}

// applyMonitoringCRDs applies the Prometheus Operator's two CRDs (testdata) and waits until
// their kinds are served.
func applyMonitoringCRDs(t *testing.T, a *applier, w *warnings) {
	t.Helper()
	for _, crd := range decodeAll(t, "testdata/monitoring-crds.yaml") {
		if err := a.apply(crd, false); err != nil {
			t.Fatalf("apply CRD %s: %v", crd.GetName(), err)
		}
	}
	// Wait until the new kinds are served.
	deadline := time.Now().Add(30 * time.Second)
	for {
		a.mapper.Reset()
		_, err := a.mapper.RESTMapping(schema.GroupKind{Group: "monitoring.coreos.com", Kind: "PodMonitor"}, "v1")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CRDs not served: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if l := w.take(); len(l) > 0 {
		t.Fatalf("warnings applying the CRDs: %q", l)
	}
}
