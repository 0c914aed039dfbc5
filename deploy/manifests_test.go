// Package deploy checks the shipped Kubernetes manifests as kustomize renders them: every object
// decodes strictly into its Kubernetes type (an unknown or misspelt field is an error), every
// workload meets the hardening a restricted cluster expects, and the wiring between them holds.
// (deploy/kubetest applies the same renders to a real kube-apiserver.)
package deploy

import (
	"bytes"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/auditlens/auditlens/deploy/render"
)

// rendered is one kustomization's objects, decoded.
type rendered struct {
	dir        string
	namespaces map[string]*corev1.Namespace
	accounts   map[string]*corev1.ServiceAccount // namespace/name
	configs    map[string]*corev1.ConfigMap      // namespace/name
	secrets    map[string]*corev1.Secret         // namespace/name
	services   map[string]*corev1.Service        // namespace/name
	pdbs       []*policyv1.PodDisruptionBudget
	policies   []*networkingv1.NetworkPolicy
	workloads  []workload
	kinds      map[string]int
}

type workload struct {
	kind, namespace, name string
	longRunning           bool
	podLabels             map[string]string
	spec                  *corev1.PodSpec
	replicas              int32 // of a Deployment or StatefulSet (1 when unset); 0 otherwise
}

// testCluster is the cluster name the tests give every overlay that asks for one.
const testCluster = "test-cluster"

func build(t *testing.T, dir string) *rendered {
	t.Helper()
	build := func() ([]*unstructured.Unstructured, error) {
		return render.BuildWithCluster("kubernetes", dir, testCluster)
	}
	if dir == "base" {
		build = func() ([]*unstructured.Unstructured, error) { return render.Build(filepath.Join("kubernetes", dir)) }
	}
	objs, err := build()
	if err != nil {
		t.Fatal(err)
	}
	r := &rendered{dir: dir, namespaces: map[string]*corev1.Namespace{}, accounts: map[string]*corev1.ServiceAccount{},
		configs: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}, services: map[string]*corev1.Service{}, kinds: map[string]int{}}
	for _, u := range objs {
		doc, err := yaml.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		key := u.GetNamespace() + "/" + u.GetName()
		strict := func(obj any) {
			t.Helper()
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Errorf("%s: %s %s: %v", dir, u.GetKind(), key, err)
			}
		}
		r.kinds[u.GetKind()]++
		switch u.GetKind() {
		case "Namespace":
			o := &corev1.Namespace{}
			strict(o)
			r.namespaces[o.Name] = o
		case "ServiceAccount":
			o := &corev1.ServiceAccount{}
			strict(o)
			r.accounts[key] = o
		case "ConfigMap":
			o := &corev1.ConfigMap{}
			strict(o)
			r.configs[key] = o
		case "Secret":
			o := &corev1.Secret{}
			strict(o)
			r.secrets[key] = o
		case "Service":
			o := &corev1.Service{}
			strict(o)
			r.services[key] = o
		case "PodDisruptionBudget":
			o := &policyv1.PodDisruptionBudget{}
			strict(o)
			r.pdbs = append(r.pdbs, o)
		case "NetworkPolicy":
			o := &networkingv1.NetworkPolicy{}
			strict(o)
			r.policies = append(r.policies, o)
		case "Deployment":
			o := &appsv1.Deployment{}
			strict(o)
			r.workloads = append(r.workloads, workload{"Deployment", o.Namespace, o.Name, true, o.Spec.Template.Labels, &o.Spec.Template.Spec, replicas(o.Spec.Replicas)})
		case "DaemonSet":
			o := &appsv1.DaemonSet{}
			strict(o)
			r.workloads = append(r.workloads, workload{"DaemonSet", o.Namespace, o.Name, true, o.Spec.Template.Labels, &o.Spec.Template.Spec, 0})
		case "StatefulSet":
			o := &appsv1.StatefulSet{}
			strict(o)
			r.workloads = append(r.workloads, workload{"StatefulSet", o.Namespace, o.Name, true, o.Spec.Template.Labels, &o.Spec.Template.Spec, replicas(o.Spec.Replicas)})
		case "CronJob":
			o := &batchv1.CronJob{}
			strict(o)
			r.workloads = append(r.workloads, workload{"CronJob", o.Namespace, o.Name, false, o.Spec.JobTemplate.Spec.Template.Labels, &o.Spec.JobTemplate.Spec.Template.Spec, 0})
		case "ClusterRole":
			// Only the roles listed in allowedRules, each granting exactly its rules.
			o := &rbacv1.ClusterRole{}
			strict(o)
			want, ok := allowedRules[o.Name]
			if !ok {
				t.Errorf("%s: ClusterRole %s: not a role this test knows", dir, o.Name)
			}
			for i, rule := range o.Rules {
				if i >= len(want) || !slices.Equal(rule.APIGroups, want[i].APIGroups) || !slices.Equal(rule.Resources, want[i].Resources) || !slices.Equal(rule.Verbs, want[i].Verbs) {
					t.Errorf("%s: ClusterRole %s grants %v: not what it is for", dir, o.Name, rule)
				}
			}
			if len(o.Rules) != len(want) {
				t.Errorf("%s: ClusterRole %s has %d rules, want %d", dir, o.Name, len(o.Rules), len(want))
			}
		case "ClusterRoleBinding":
			// Only the report's: its reviews of tokens and access (the console's authenticated
			// listener), its UpgradeReadiness objects and the namespaces' labels (readiness).
			o := &rbacv1.ClusterRoleBinding{}
			strict(o)
			if !reportBindings[o.RoleRef.Name] || len(o.Subjects) != 1 || o.Subjects[0].Name != "report" || o.Subjects[0].Namespace != "auditlens" {
				t.Errorf("%s: ClusterRoleBinding %s binds %s to %v: only the report's system:auth-delegator, auditlens-report-readiness and auditlens-report-namespaces belong here", dir, o.Name, o.RoleRef.Name, o.Subjects)
			}
		case "CustomResourceDefinition":
			// UpgradeReadiness (components/readiness); kubetest applies it to a real apiserver,
			// which checks its schema, and report's objects against it.
			scope, _, _ := unstructured.NestedString(u.Object, "spec", "scope")
			if u.GetName() != "upgradereadinesses.auditlens.io" || scope != "Cluster" {
				t.Errorf("%s: CustomResourceDefinition %s (%s): only the cluster-scoped UpgradeReadiness belongs here", dir, u.GetName(), scope)
			}
		case "PodMonitor", "PrometheusRule":
			// Custom resources: kubernetes/components/monitoring's tests check the rules; kubetest applies
			// both to a real apiserver with their CRDs.
		default:
			t.Errorf("%s: unexpected kind %s (%s): add it to this test", dir, u.GetKind(), key)
		}
		if clusterScoped := u.GetKind() == "Namespace" || u.GetKind() == "ClusterRole" || u.GetKind() == "ClusterRoleBinding" || u.GetKind() == "CustomResourceDefinition"; !clusterScoped && u.GetNamespace() == "" {
			t.Errorf("%s: %s %s names no namespace", dir, u.GetKind(), u.GetName())
		}
	}
	return r
}

// allowedRules are the ClusterRoles the manifests may hold and the rules each grants.
var allowedRules = map[string][]rbacv1.PolicyRule{
	// The console's readers: get on auditlens.io/console (components/console).
	"auditlens-console-reader": {{APIGroups: []string{"auditlens.io"}, Resources: []string{"console"}, Verbs: []string{"get"}}},
	// components/readiness (deploy/crds/rbac.yaml links to it).
	"auditlens-report-readiness": {
		{APIGroups: []string{"auditlens.io"}, Resources: []string{"upgradereadinesses"}, Verbs: []string{"get", "create", "patch"}},
		{APIGroups: []string{"auditlens.io"}, Resources: []string{"upgradereadinesses/status"}, Verbs: []string{"get", "patch"}},
	},
	"auditlens-upgradereadiness-reader": {{APIGroups: []string{"auditlens.io"}, Resources: []string{"upgradereadinesses"}, Verbs: []string{"get", "list", "watch"}}},
	"auditlens-report-namespaces":       {{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"list"}}},
}

// reportBindings are the ClusterRoles the report's service account may be bound to.
var reportBindings = map[string]bool{"system:auth-delegator": true, "auditlens-report-readiness": true, "auditlens-report-namespaces": true}

func kustomizations(t *testing.T) []string {
	dirs, err := render.Kustomizations("kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"base", "overlays/aks", "overlays/cluster", "overlays/console", "overlays/eks", "overlays/eks-cloudwatch", "overlays/gke", "overlays/kafka", "overlays/quickstart", "overlays/self-managed", "overlays/webhook"}
	if !slices.Equal(dirs, want) {
		t.Fatalf("kustomizations %v, want %v", dirs, want)
	}
	return dirs
}

func components(t *testing.T) []string {
	dirs, err := render.Components("kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"components/cloudwatch", "components/cluster", "components/console", "components/eventhubs", "components/file-ingest", "components/firehose", "components/kafka", "components/kube-api", "components/monitoring", "components/pubsub", "components/quickstart", "components/readiness", "components/settings", "components/webhook", "components/weekly"}
	if !slices.Equal(dirs, want) {
		t.Fatalf("components %v, want %v", dirs, want)
	}
	return dirs
}

// managed are the overlays for control planes whose log file is out of reach: they must hold
// no DaemonSet and no privileged namespace.
var managed = map[string]bool{"overlays/eks": true, "overlays/eks-cloudwatch": true, "overlays/aks": true, "overlays/gke": true, "overlays/webhook": true}

// defaultRegistry is the Makefile's REGISTRY, where `make images` names the images: the one
// place the registry is set, which the manifests must follow.
func defaultRegistry(t *testing.T) string {
	b, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^REGISTRY \?= (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("the Makefile sets no REGISTRY ?= ...")
	}
	return string(m[1])
}

func version(t *testing.T) string {
	b, err := os.ReadFile("VERSION")
	if err != nil {
		t.Fatal(err)
	}
	return string(bytes.TrimSpace(b))
}

// Every directory with YAML under kubernetes/ is a kustomization or a component, every YAML
// file in it is one of its resources (or a test case), and every component is part of an
// overlay, so nothing is left out of what gets applied.
func TestEveryManifestIsRendered(t *testing.T) {
	used := map[string]bool{}
	for _, dir := range kustomizations(t) {
		b, err := os.ReadFile(filepath.Join("kubernetes", dir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var k struct {
			Components []string `json:"components"`
		}
		if err := yaml.Unmarshal(b, &k); err != nil {
			t.Fatal(err)
		}
		for _, c := range k.Components {
			used[path.Clean(path.Join(dir, c))] = true
		}
	}
	for _, c := range components(t) {
		if !used[c] {
			t.Errorf("%s is part of no overlay: nothing renders or applies it", c)
		}
	}
	for _, dir := range append(kustomizations(t), components(t)...) {
		b, err := os.ReadFile(filepath.Join("kubernetes", dir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var k struct {
			Resources          []string `json:"resources"`
			ConfigMapGenerator []struct {
				Files []string `json:"files"`
			} `json:"configMapGenerator"`
		}
		if err := yaml.Unmarshal(b, &k); err != nil {
			t.Fatal(err)
		}
		used := slices.Clone(k.Resources)
		for _, g := range k.ConfigMapGenerator {
			used = append(used, g.Files...)
		}
		files, _ := filepath.Glob(filepath.Join("kubernetes", dir, "*.yaml"))
		for _, f := range files {
			if name := filepath.Base(f); name != "kustomization.yaml" && !slices.Contains(used, name) {
				t.Errorf("%s: %s is not in its kustomization's resources or generated ConfigMaps", dir, name)
			}
		}
	}
}

// An overlay installed as shipped stops at the build, with a message that names the missing
// cluster literal; only the quickstart names its own ("quickstart"). No overlay or component
// carries a real cluster's name as a default.
func TestClusterNameIsRequired(t *testing.T) {
	for _, dir := range kustomizations(t) {
		if dir == "base" {
			continue
		}
		_, err := render.Build(filepath.Join("kubernetes", dir))
		if dir == "overlays/quickstart" {
			if err != nil {
				t.Errorf("%s: %v", dir, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "data.cluster") || !strings.Contains(err.Error(), "auditlens-settings") {
			t.Errorf("%s as shipped: %v, want the build to stop naming data.cluster of auditlens-settings", dir, err)
		}
	}
	err := filepath.WalkDir("kubernetes", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if code, _, _ := strings.Cut(line, "#"); strings.Contains(code, "prod-eu-1") || strings.Contains(code, "AUDITLENS_CLUSTER: ") && !strings.Contains(code, `AUDITLENS_CLUSTER: ""`) {
				t.Errorf("%s: %q: the cluster's name comes from the overlay's literal only", p, line)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestKustomizationsRenderHardened(t *testing.T) {
	tag, registry := version(t), defaultRegistry(t)
	for _, dir := range kustomizations(t) {
		t.Run(dir, func(t *testing.T) {
			r := build(t, dir)
			if dir == "overlays/cluster" && (r.kinds["PrometheusRule"] != 1 || r.kinds["PodMonitor"] != 1) {
				t.Fatalf("kinds %v: the cluster overlay carries the monitoring component", r.kinds)
			}
			wantDaemonSets := 1
			if managed[dir] || dir == "base" {
				wantDaemonSets = 0
			}
			if r.kinds["Deployment"] < 2 || r.kinds["DaemonSet"] != wantDaemonSets {
				t.Fatalf("kinds %v, want %d DaemonSet", r.kinds, wantDaemonSets)
			}
			for name, ns := range r.namespaces {
				if managed[dir] && ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
					t.Errorf("%s: namespace %s is not restricted: a managed control plane needs no privileged namespace", dir, name)
				}
			}
			checkNamespaces(t, r)
			for _, w := range r.workloads {
				checkWorkload(t, r, w, registry, tag)
			}
			checkPDBs(t, r)
			checkNetworkPolicies(t, r)
			checkConfig(t, r)
			checkScaleOut(t, r)
			checkFiles(t, r)
			checkReadiness(t, r)
		})
	}
}

// Every namespace enforces a Pod Security level: restricted, except the ingest DaemonSet's own.
func checkNamespaces(t *testing.T, r *rendered) {
	for name, ns := range r.namespaces {
		level := ns.Labels["pod-security.kubernetes.io/enforce"]
		want := "restricted"
		if name == "auditlens-ingest" {
			want = "privileged"
		}
		if level != want || ns.Labels["pod-security.kubernetes.io/enforce-version"] != "latest" {
			t.Errorf("namespace %s enforces %q (version %q), want %q at latest", name, level, ns.Labels["pod-security.kubernetes.io/enforce-version"], want)
		}
	}
	for _, w := range r.workloads {
		if r.namespaces[w.namespace] == nil {
			t.Errorf("%s %s: namespace %s is not created by this kustomization", w.kind, w.name, w.namespace)
		}
	}
}

func checkWorkload(t *testing.T, r *rendered, w workload, registry, tag string) {
	id := w.kind + " " + w.namespace + "/" + w.name
	s := w.spec
	privileged := r.namespaces[w.namespace].Labels["pod-security.kubernetes.io/enforce"] == "privileged"
	if privileged && w.kind != "DaemonSet" {
		t.Errorf("%s: only the ingest DaemonSet belongs in the privileged namespace", id)
	}
	if s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken {
		t.Errorf("%s: automountServiceAccountToken is not false", id)
	}
	if sa := r.accounts[w.namespace+"/"+s.ServiceAccountName]; s.ServiceAccountName == "" || sa == nil {
		t.Errorf("%s: service account %q is not created here", id, s.ServiceAccountName)
	} else if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Errorf("%s: service account %s mounts its token", id, sa.Name)
	}
	// The images are multi-arch (amd64, arm64): nothing may pin an architecture.
	for k := range s.NodeSelector {
		if strings.Contains(k, "arch") {
			t.Errorf("%s: nodeSelector pins %s: the images are multi-arch", id, k)
		}
	}
	if s.Affinity != nil && s.Affinity.NodeAffinity != nil {
		t.Errorf("%s: node affinity is not checked by this test (it must not pin an architecture)", id)
	}
	if s.HostNetwork || s.HostPID || s.HostIPC {
		t.Errorf("%s: uses host namespaces", id)
	}
	for _, v := range s.Volumes {
		if v.HostPath != nil && !privileged {
			t.Errorf("%s: hostPath volume %s outside the privileged namespace", id, v.Name)
		}
	}
	podSC := s.SecurityContext
	if podSC == nil || podSC.SeccompProfile == nil || podSC.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod seccomp profile is not RuntimeDefault", id)
	}
	if len(s.InitContainers) > 0 {
		t.Errorf("%s: init containers are not checked by this test", id)
	}
	for _, c := range s.Containers {
		cid := id + " container " + c.Name
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("%s: no securityContext", cid)
			continue
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: allowPrivilegeEscalation is not false", cid)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: root filesystem is not read-only", cid)
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("%s: privileged", cid)
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			t.Errorf("%s: capabilities are not drop [ALL] with none added", cid)
		}
		// Non-root everywhere; uid 0 only for the ingest DaemonSet (it reads the apiserver's
		// root-owned 0600 log as its owner, with every capability dropped).
		uid, nonRoot := podSC.RunAsUser, podSC.RunAsNonRoot
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
		if sc.RunAsNonRoot != nil {
			nonRoot = sc.RunAsNonRoot
		}
		if privileged {
			if uid == nil || *uid != 0 {
				t.Errorf("%s: the file ingest must run as uid 0 to read a 0600 root-owned log", cid)
			}
		} else if nonRoot == nil || !*nonRoot || uid == nil || *uid == 0 {
			t.Errorf("%s: not runAsNonRoot with a numeric non-zero uid", cid)
		}
		for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if _, ok := c.Resources.Requests[res]; !ok {
				t.Errorf("%s: no %s request", cid, res)
			}
			if _, ok := c.Resources.Limits[res]; !ok {
				t.Errorf("%s: no %s limit", cid, res)
			}
		}
		if w.longRunning && (c.ReadinessProbe == nil || c.LivenessProbe == nil) {
			t.Errorf("%s: long-running container without readiness and liveness probes", cid)
		}
		for _, p := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
			if p == nil || p.HTTPGet == nil {
				continue
			}
			if !slices.ContainsFunc(c.Ports, func(port corev1.ContainerPort) bool { return port.Name == p.HTTPGet.Port.String() }) {
				t.Errorf("%s: probe port %s not declared", cid, p.HTTPGet.Port.String())
			}
		}
		if c.Image == "" || strings.HasSuffix(c.Image, ":latest") || !strings.Contains(c.Image, ":") {
			t.Errorf("%s: image %q has no pinned tag", cid, c.Image)
		}
		repo, _, _ := strings.Cut(c.Image, ":")
		if b := path.Base(repo); b != "ingest" && b != "classify" && b != "report" && b != "auditlens" {
			continue
		}
		if want := registry + "/" + path.Base(repo) + ":" + tag; c.Image != want {
			t.Errorf("%s: image %q, want %q (the registry and tag make images writes: the Makefile's REGISTRY, deploy/VERSION)", cid, c.Image, want)
		}
		if !slices.ContainsFunc(c.EnvFrom, func(e corev1.EnvFromSource) bool {
			return e.ConfigMapRef != nil && e.ConfigMapRef.Name == "auditlens" && r.configs[w.namespace+"/auditlens"] != nil
		}) {
			t.Errorf("%s: does not read the auditlens ConfigMap of its namespace", cid)
		}
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
			return e.Name == "GOMEMLIMIT" && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil &&
				e.ValueFrom.ResourceFieldRef.Resource == "limits.memory" && e.ValueFrom.ResourceFieldRef.Divisor.IsZero()
		}) {
			t.Errorf("%s: GOMEMLIMIT is not the memory limit in bytes (downward API)", cid)
		}
	}
}

// Every long-running workload has a PodDisruptionBudget selecting its pods, and none blocks a drain.
func checkPDBs(t *testing.T, r *rendered) {
	for _, w := range r.workloads {
		if !w.longRunning {
			continue
		}
		n := 0
		for _, p := range r.pdbs {
			sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
			if err != nil {
				t.Fatal(err)
			}
			if p.Namespace == w.namespace && sel.Matches(labels.Set(w.podLabels)) {
				n++
				if p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.IntValue() < 1 {
					t.Errorf("PDB %s/%s does not allow one pod down", p.Namespace, p.Name)
				}
			}
		}
		if n != 1 {
			t.Errorf("%s %s/%s: %d PodDisruptionBudgets select its pods, want 1", w.kind, w.namespace, w.name, n)
		}
	}
}

// Each namespace with pods denies all traffic by default; each pod's allowed ports are only
// those listed in this test.
func checkNetworkPolicies(t *testing.T, r *rendered) {
	for ns := range r.namespaces {
		if !slices.ContainsFunc(r.policies, func(p *networkingv1.NetworkPolicy) bool {
			return p.Namespace == ns && len(p.Spec.PodSelector.MatchLabels)+len(p.Spec.PodSelector.MatchExpressions) == 0 &&
				len(p.Spec.Ingress)+len(p.Spec.Egress) == 0 && slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) &&
				slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		}) {
			t.Errorf("namespace %s: no default-deny NetworkPolicy", ns)
		}
	}
	allowedOut := map[int32]bool{53: true, 4222: true, 9092: true, 9000: true, 25: true, 465: true, 587: true,
		9093: true,                      // AKS: Event Hubs' Kafka endpoint
		443:  true, 80: true, 988: true, // GKE: the Pub/Sub API, the metadata server (Workload Identity); the apiserver
		6443: true, // the apiserver (console reviews, UpgradeReadiness objects)
	}
	allowedIn := map[int32]bool{9090: true, 8443: true, 4222: true, 9000: true, 9443: true}
	for _, p := range r.policies {
		// Metrics from the overlay's monitoring-namespace literal (components/settings): every
		// overlay names "monitoring"; the base leaves it empty (no namespace has that name).
		if p.Name == "allow-metrics" {
			want := "monitoring"
			if r.dir == "base" {
				want = ""
			}
			for _, i := range p.Spec.Ingress {
				for _, peer := range i.From {
					if peer.NamespaceSelector == nil || peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != want {
						t.Errorf("NetworkPolicy %s/%s admits metrics from %v, want namespace %q", p.Namespace, p.Name, peer.NamespaceSelector, want)
					}
				}
			}
		}
		for _, e := range p.Spec.Egress {
			if len(e.Ports) == 0 {
				t.Errorf("NetworkPolicy %s/%s allows egress on every port", p.Namespace, p.Name)
			}
			for _, port := range e.Ports {
				if port.Port == nil || !allowedOut[port.Port.IntVal] {
					t.Errorf("NetworkPolicy %s/%s allows egress to port %v", p.Namespace, p.Name, port.Port)
				}
			}
		}
		for _, i := range p.Spec.Ingress {
			// Metrics and the console: from the namespaces named for them only, never from all.
			if slices.ContainsFunc(i.Ports, func(port networkingv1.NetworkPolicyPort) bool {
				return port.Port != nil && (port.Port.IntVal == 9090 || port.Port.IntVal == 9443)
			}) {
				if len(i.From) == 0 {
					t.Errorf("NetworkPolicy %s/%s admits metrics or the console from everywhere", p.Namespace, p.Name)
				}
				for _, peer := range i.From {
					if peer.NamespaceSelector == nil || len(peer.NamespaceSelector.MatchLabels) == 0 || peer.IPBlock != nil {
						t.Errorf("NetworkPolicy %s/%s admits metrics or the console from every namespace (%v)", p.Namespace, p.Name, peer)
					}
				}
			}
			if len(i.Ports) == 0 {
				t.Errorf("NetworkPolicy %s/%s allows ingress on every port", p.Namespace, p.Name)
			}
			for _, port := range i.Ports {
				if port.Port == nil || !allowedIn[port.Port.IntVal] {
					t.Errorf("NetworkPolicy %s/%s allows ingress to port %v", p.Namespace, p.Name, port.Port)
				}
			}
		}
	}
}

// The shared settings name the bus and store; in the quickstart they resolve to its own Services.
func checkConfig(t *testing.T, r *rendered) {
	for _, ns := range []string{"auditlens", "auditlens-ingest"} {
		cm := r.configs[ns+"/auditlens"]
		if cm == nil {
			if ns == "auditlens" || r.namespaces[ns] != nil {
				t.Errorf("no auditlens ConfigMap in %s", ns)
			}
			continue
		}
		// The cluster's name is the one the installer gave (components/settings), never a default.
		wantCluster := testCluster
		switch r.dir {
		case "base":
			wantCluster = ""
		case "overlays/quickstart":
			wantCluster = "quickstart"
		}
		if got := cm.Data["AUDITLENS_CLUSTER"]; got != wantCluster {
			t.Errorf("ConfigMap %s/auditlens: AUDITLENS_CLUSTER %q, want %q", ns, got, wantCluster)
		}
		for k := range cm.Data {
			if !strings.HasPrefix(k, "AUDITLENS_") {
				t.Errorf("ConfigMap %s/auditlens: %s is not an AUDITLENS_* setting", ns, k)
			}
		}
		nats, kafka := cm.Data["AUDITLENS_NATS_URL"], cm.Data["AUDITLENS_KAFKA_BROKERS"]
		switch r.dir {
		case "overlays/kafka":
			if nats != "" || kafka == "" {
				t.Errorf("%s: kafka overlay still names NATS (%q) or no brokers (%q)", ns, nats, kafka)
			}
		default:
			if nats == "" || kafka != "" {
				t.Errorf("%s: NATS URL %q, Kafka brokers %q", ns, nats, kafka)
			}
		}
		if r.dir == "overlays/quickstart" {
			for _, target := range []string{strings.TrimPrefix(nats, "nats://"), strings.TrimSuffix(strings.TrimPrefix(r.clickhouseDSN(t), "clickhouse://"), "/auditlens")} {
				host, port, _ := strings.Cut(target, ":")
				name, svcNS, _ := strings.Cut(host, ".")
				svc := r.services[svcNS+"/"+name]
				if svc == nil || !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return port == itoa(p.Port) }) {
					t.Errorf("quickstart: %s is not a Service port of the quickstart", target)
				}
			}
		}
	}
	switch r.dir {
	case "overlays/webhook":
		checkSecretFiles(t, r, "ingest-webhook", map[string]string{"--webhook-tls-cert": "auditlens-webhook-tls",
			"--webhook-tls-key": "auditlens-webhook-tls", "--webhook-token-file": "auditlens-webhook"})
	case "overlays/eks":
		checkSecretFiles(t, r, "ingest-firehose", map[string]string{"--firehose-tls-cert": "auditlens-firehose-tls",
			"--firehose-tls-key": "auditlens-firehose-tls", "--firehose-access-key-file": "auditlens-firehose"})
	case "overlays/aks":
		checkSecretFiles(t, r, "ingest-eventhubs", map[string]string{"--eventhubs-connection-string-file": "auditlens-eventhubs"})
	case "overlays/gke":
		checkSecretFiles(t, r, "ingest-pubsub", map[string]string{}) // Workload Identity: no key file
	case "overlays/eks-cloudwatch":
		checkSecretFiles(t, r, "ingest-cloudwatch", map[string]string{}) // Pod Identity or IRSA: no key file
	}
}

// The ingest Deployment name of an overlay reads each of its secret files (flag -> Secret) from
// a mount of the Secret its kustomization tells you to create, and every file flag is listed.
func checkSecretFiles(t *testing.T, r *rendered, name string, secrets map[string]string) {
	for _, w := range r.workloads {
		if w.name != name {
			continue
		}
		mounts := map[string]string{} // mount path -> secret
		for _, c := range w.spec.Containers {
			for _, m := range c.VolumeMounts {
				for _, v := range w.spec.Volumes {
					if v.Name == m.Name && v.Secret != nil {
						mounts[m.MountPath] = v.Secret.SecretName
					}
				}
			}
			seen := 0
			for _, a := range c.Args {
				flag, path, _ := strings.Cut(a, "=")
				want, ok := secrets[flag]
				if !ok {
					if strings.HasSuffix(flag, "-file") || strings.HasSuffix(flag, "-cert") || strings.HasSuffix(flag, "-key") {
						t.Errorf("%s: %s names a file the test does not know", name, a)
					}
					continue
				}
				seen++
				if mounts[filepath.Dir(path)] != want {
					t.Errorf("%s: %s=%s is not in a mount of Secret %s", name, flag, path, want)
				}
			}
			if seen != len(secrets) {
				t.Errorf("%s: %d of the %d secret files given", name, seen, len(secrets))
			}
		}
		return
	}
	t.Errorf("%s has no %s Deployment", r.dir, name)
}

func itoa(i int32) string {
	b, _ := yaml.Marshal(i)
	return string(bytes.TrimSpace(b))
}

var _ = unstructured.Unstructured{}

// Every file a container's env names (AUDITLENS_*_FILE) is on a volume mounted into it: a
// component that names a file without the volume (components/readiness without
// components/kube-api) would start a pod that cannot read it. Every AUDITLENS_* variable a
// container sets is a flag's env twin (a misspelt one would be ignored silently).
func checkFiles(t *testing.T, r *rendered) {
	twins := envTwins(t)
	for _, w := range r.workloads {
		for _, c := range w.spec.Containers {
			for _, e := range c.Env {
				if strings.HasPrefix(e.Name, "AUDITLENS_") && !twins[e.Name] {
					t.Errorf("%s %s container %s: %s is the env twin of no flag in docs/configuration.md", w.kind, w.name, c.Name, e.Name)
				}
				if !strings.HasPrefix(e.Name, "AUDITLENS_") || !strings.HasSuffix(e.Name, "_FILE") {
					continue
				}
				if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
					return strings.HasPrefix(e.Value, strings.TrimSuffix(m.MountPath, "/")+"/")
				}) {
					t.Errorf("%s %s container %s: %s=%s is on no volume mounted into it", w.kind, w.name, c.Name, e.Name, e.Value)
				}
			}
		}
	}
}

// readinessOverlays carry components/readiness: the self-managed control planes, where report
// runs in the cluster it judges (the managed-cloud overlays may run it anywhere; add it there
// as these do).
var readinessOverlays = map[string]bool{"overlays/self-managed": true, "overlays/cluster": true}

// consoleOverlays list components/console: the authenticated listener, whose token reviews
// need the report's route to the apiserver.
var consoleOverlays = map[string]bool{"overlays/console": true}

// The readiness overlays keep UpgradeReadiness objects for the overlay's target versions, with
// report's own token, and give report and the weekly CronJob the owners and acknowledgements
// files; the others do none of it.
func checkReadiness(t *testing.T, r *rendered) {
	want := readinessOverlays[r.dir]
	if got := r.kinds["CustomResourceDefinition"] == 1; got != want {
		t.Errorf("%s: UpgradeReadiness CRD %v, want %v", r.dir, got, want)
	}
	for _, w := range r.workloads {
		if w.name != "report" && w.name != "report-weekly" {
			continue
		}
		env := map[string]string{}
		for _, e := range w.spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		wantEnv := map[string]string{
			"AUDITLENS_OWNERS_FILE":           "/etc/auditlens/owners/owners.yaml",
			"AUDITLENS_ACKNOWLEDGEMENTS_FILE": "/etc/auditlens/acknowledgements/acknowledgements.yaml",
		}
		if w.name == "report" {
			wantEnv["AUDITLENS_READINESS_OBJECTS"] = "true"
			wantEnv["AUDITLENS_READINESS_TARGET_VERSIONS"] = "1.34,1.35"
		}
		for k, v := range wantEnv {
			if got, ok := env[k]; want && got != v || !want && ok {
				t.Errorf("%s: %s %s: %s=%q (set %v), want %q", r.dir, w.kind, w.name, k, got, ok, v)
			}
		}
		// The objects and the console's token reviews reach the apiserver one way: report's own
		// token from components/kube-api.
		if w.name == "report" {
			wantKube := want || consoleOverlays[r.dir]
			for k, v := range map[string]string{
				"AUDITLENS_REPORT_KUBE_URL":        "https://kubernetes.default.svc",
				"AUDITLENS_REPORT_KUBE_TOKEN_FILE": "/var/run/secrets/auditlens/kube/token",
				"AUDITLENS_REPORT_KUBE_CA_FILE":    "/var/run/secrets/auditlens/kube/ca.crt",
			} {
				if got, ok := env[k]; wantKube && got != v || !wantKube && ok {
					t.Errorf("%s: %s %s: %s=%q (set %v), want %q", r.dir, w.kind, w.name, k, got, ok, v)
				}
			}
		}
		if want && r.configs["auditlens/auditlens-owners"] == nil || want && r.configs["auditlens/auditlens-acknowledgements"] == nil {
			t.Errorf("%s: no ConfigMap auditlens-owners or auditlens-acknowledgements", r.dir)
		}
	}
}

// The way deploy/README.md gives to ship one's own owners and acknowledgements files: a
// component listed after components/readiness whose generator replaces the ConfigMaps. The
// files given (the repository's examples) are what report reads.
func TestReadinessFilesReplacedByAComponent(t *testing.T) {
	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS("kubernetes")); err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(root, "components", "my-files")
	if err := os.MkdirAll(mine, 0o755); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, name := range []string{"owners", "acknowledgements"} {
		b, err := os.ReadFile(filepath.Join("..", "examples", name+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		want[name] = string(b)
		if err := os.WriteFile(filepath.Join(mine, name+".yaml"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	component := `apiVersion: kustomize.config.k8s.io/v1alpha1
kind: Component
configMapGenerator:
  - {name: auditlens-owners, namespace: auditlens, behavior: replace, options: {disableNameSuffixHash: true}, files: [owners.yaml]}
  - {name: auditlens-acknowledgements, namespace: auditlens, behavior: replace, options: {disableNameSuffixHash: true}, files: [acknowledgements.yaml]}
`
	if err := os.WriteFile(filepath.Join(mine, "kustomization.yaml"), []byte(component), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(root, "overlays", "self-managed", "kustomization.yaml")
	b, err := os.ReadFile(overlay)
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte("  - ../../components/readiness\n"), []byte("  - ../../components/readiness\n  - ../../components/my-files\n"), 1)
	if err := os.WriteFile(overlay, b, 0o644); err != nil {
		t.Fatal(err)
	}
	objs, err := render.BuildWithCluster(root, "overlays/self-managed", testCluster)
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for _, u := range objs {
		name, ok := strings.CutPrefix(u.GetName(), "auditlens-")
		if u.GetKind() != "ConfigMap" || !ok || want[name] == "" {
			continue
		}
		data, _, _ := unstructured.NestedString(u.Object, "data", name+".yaml")
		if data != want[name] {
			t.Errorf("ConfigMap %s holds %q, want examples/%s.yaml", u.GetName(), data, name)
		}
		got++
	}
	if got != 2 {
		t.Errorf("%d of the two ConfigMaps rendered", got)
	}
}

// clickhouseDSN is the DSN of the Secret auditlens/auditlens-clickhouse.
func (r *rendered) clickhouseDSN(t *testing.T) string {
	t.Helper()
	s := r.secrets["auditlens/auditlens-clickhouse"]
	if s == nil {
		t.Errorf("%s: no Secret auditlens/auditlens-clickhouse", r.dir)
		return ""
	}
	return s.StringData["AUDITLENS_CLICKHOUSE_DSN"] + string(s.Data["AUDITLENS_CLICKHOUSE_DSN"])
}

// The ClickHouse DSN carries the password when ClickHouse has one (review 3 E17): it is in the
// Secret auditlens-clickhouse, never in a ConfigMap, and only the workloads that write or read
// ClickHouse (report, the weekly CronJob) are given it.
func TestClickHouseDSNIsASecret(t *testing.T) {
	for _, dir := range kustomizations(t) {
		t.Run(dir, func(t *testing.T) {
			r := build(t, dir)
			for key, cm := range r.configs {
				for k, v := range cm.Data {
					if k == "AUDITLENS_CLICKHOUSE_DSN" || strings.Contains(v, "clickhouse://") {
						t.Errorf("%s: ConfigMap %s holds the ClickHouse DSN in %s", dir, key, k)
					}
				}
			}
			if !strings.HasPrefix(r.clickhouseDSN(t), "clickhouse://") {
				t.Errorf("%s: Secret auditlens-clickhouse holds no DSN", dir)
			}
			for _, w := range r.workloads {
				refs := false
				for _, c := range append(slices.Clone(w.spec.InitContainers), w.spec.Containers...) {
					for _, e := range c.EnvFrom {
						refs = refs || e.SecretRef != nil && e.SecretRef.Name == "auditlens-clickhouse"
					}
				}
				wants := w.namespace == "auditlens" && (w.name == "report" || w.name == "report-weekly")
				if refs != wants {
					t.Errorf("%s: %s %s/%s reads the Secret auditlens-clickhouse: %v, want %v", dir, w.kind, w.namespace, w.name, refs, wants)
				}
			}
		})
	}
}
