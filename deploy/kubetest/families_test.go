package kubetest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/auditlens/auditlens/deploy/kubetest/kubeapiserver"
)

// familiesFixture is the genuine audit log the rule families' tests read (classify's rules
// package), rewritten by -update.
const familiesFixture = "../../services/classify/rules/testdata/families-1.37.log"

// familiesNS holds the namespaced objects of TestRuleFamilyEventsOnARealAPIServer.
const familiesNS = "families"

// familyUser is a static-token user of the apiserver.
type familyUser struct{ name, token, groups string }

var (
	nodeOld        = familyUser{"system:node:node-old", "families-node-old", "system:nodes"}
	nodeNew        = familyUser{"system:node:node-new", "families-node-new", "system:nodes"}
	kubeProxy      = familyUser{"system:kube-proxy", "families-kube-proxy", ""}
	alice          = familyUser{"alice", "families-alice", ""}
	controllerMgr  = familyUser{"system:kube-controller-manager", "families-controller-manager", ""}
	scheduler      = familyUser{"system:kube-scheduler", "families-scheduler", ""}
	mallory        = familyUser{"mallory", "families-mallory", ""}
	ingressNginx   = familyUser{"system:serviceaccount:ingress-nginx:ingress-nginx", "families-ingress-nginx", "system:serviceaccounts,system:serviceaccounts:ingress-nginx"}
	drainer        = familyUser{"drainer", "families-drainer", ""}
	metricsScraper = familyUser{"metrics-scraper", "families-metrics-scraper", ""}
	familyUsers    = []familyUser{nodeOld, nodeNew, kubeProxy, alice, controllerMgr, scheduler, mallory, ingressNginx, drainer, metricsScraper}
)

func (u familyUser) tokenLine() string {
	line := u.token + "," + u.name + "," + strings.ReplaceAll(u.name, ":", "-") + "-uid"
	if u.groups != "" {
		line += `,"` + u.groups + `"`
	}
	return line
}

// The user agents of the version-skew case (the cluster runs 1.37; the rules' target is 1.38).
const (
	agentKubeletOld  = "kubelet/v1.33.4 (linux/amd64) kubernetes/74cdb42"
	agentKubeletNew  = "kubelet/v1.37.2 (linux/amd64) kubernetes/5f0ab2c"
	agentKubeProxy   = "kube-proxy/v1.34.1 (linux/amd64) kubernetes/93248f9"
	agentKubectlOld  = "kubectl/v1.35.0 (linux/amd64) kubernetes/66452049"
	agentKubectlNew  = "kubectl/v1.37.1 (darwin/arm64) kubernetes/5f0ab2c"
	agentCM          = "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/5f0ab2c/system:kube-controller-manager"
	agentScheduler   = "kube-scheduler/v1.37.2 (linux/amd64) kubernetes/5f0ab2c/scheduler"
	agentFakeKubelet = "kubelet/v1.20.0 (linux/amd64) kubernetes/abc"
	agentIngress     = "nginx-ingress-controller/v1.11.2 (linux/amd64) ingress-nginx/abcdef"
	agentDrain       = "kubectl/v1.37.1 (linux/amd64) kubernetes/5f0ab2c"
	agentPrometheus  = "prometheus/2.53.0"
	agentAdmin       = "auditlens-families-test/1.0"
	agentArgo        = "argocd-application-controller/v2.10.4+f5d63a5 (linux/amd64)"
	agentTrust       = "trust-manager/v0.12.0"
)

// selfSignedPEM is a CA certificate, PEM-encoded, named cn.
func selfSignedPEM(t *testing.T, cn string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// A fixed validity that spans any date a test runs on: no clock is read.
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// TestRuleFamilyEventsOnARealAPIServer drives a real kube-apiserver 1.37 through the requests
// of the rule families (version skew of clients, node runtimes, request bodies, drains blocked
// by a PodDisruptionBudget, webhooks failing open, nodes/proxy), each with near misses, and
// checks on its own audit log the facts the rules are built on. With -update the log becomes
// the rules' fixture, every line as the apiserver wrote it.
func TestRuleFamilyEventsOnARealAPIServer(t *testing.T) {
	auditLog := filepath.Join(t.TempDir(), "audit.log")
	var tokens []string
	for _, u := range familyUsers {
		tokens = append(tokens, u.tokenLine())
	}
	s := kubeapiserver.Start(t, kubeapiserver.Options{AuditPolicy: "../audit-policy.yaml", AuditLog: auditLog, Tokens: tokens})
	ctx := context.Background()
	w := &warnings{}
	as := func(u familyUser, agent string) *kubernetes.Clientset {
		cfg := s.Config(w)
		cfg.UserAgent = agent
		if u.token != "" {
			cfg.BearerToken = u.token
		}
		return kubernetes.NewForConfigOrDie(cfg)
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	admin := as(familyUser{}, agentAdmin)
	// warned holds the warnings the apiserver answered each create(what, ...) with.
	warned := map[string][]string{}
	create := func(what string, err error) {
		t.Helper()
		must("create "+what, err)
		warned[what] = w.take()
	}

	// Setup: the namespaces (no controller manager creates their default service accounts)
	// and the RBAC of the users whose requests should succeed.
	for _, ns := range []string{familiesNS, "families-other"} {
		_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		must("create namespace", err)
		_, err = admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
		must("create default service account", err)
	}
	grant := func(u familyUser, rules ...rbacv1.PolicyRule) {
		t.Helper()
		name := "families-" + strings.ReplaceAll(u.name, ":", "-")
		_, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
		must("create cluster role", err)
		_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: u.name}}}, metav1.CreateOptions{})
		must("create cluster role binding", err)
	}
	grant(alice, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}})
	grant(ingressNginx, rbacv1.PolicyRule{APIGroups: []string{networkingv1.GroupName}, Resources: []string{"ingresses", "ingressclasses"}, Verbs: []string{"get", "list"}})
	grant(drainer, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}})
	grant(metricsScraper, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes/proxy"}, Verbs: []string{"get"}})

	// The webhooks first, so that the apiserver's informers know them long before the
	// ConfigMap and Secret of case 4 are created. Nobody listens on the port.
	down := "https://" + freeAddr(t)
	ignore, none := admissionv1.Ignore, admissionv1.SideEffectClassNone
	timeout := int32(2)
	inFamilies := &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: familiesNS}}
	hookRule := func(resource string) []admissionv1.RuleWithOperations {
		return []admissionv1.RuleWithOperations{{Operations: []admissionv1.OperationType{admissionv1.Create},
			Rule: admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{resource}}}}
	}
	validateURL, mutateURL := down+"/validate", down+"/mutate"
	_, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "unreachable-policy.example.com"},
		Webhooks: []admissionv1.ValidatingWebhook{{Name: "unreachable-policy.example.com", ClientConfig: admissionv1.WebhookClientConfig{URL: &validateURL},
			Rules: hookRule("configmaps"), FailurePolicy: &ignore, SideEffects: &none, TimeoutSeconds: &timeout,
			NamespaceSelector: inFamilies, AdmissionReviewVersions: []string{"v1"}}},
	}, metav1.CreateOptions{})
	must("create validating webhook", err)
	_, err = admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "unreachable-mutator.example.com"},
		Webhooks: []admissionv1.MutatingWebhook{{Name: "unreachable-mutator.example.com", ClientConfig: admissionv1.WebhookClientConfig{URL: &mutateURL},
			Rules: hookRule("secrets"), FailurePolicy: &ignore, SideEffects: &none, TimeoutSeconds: &timeout,
			NamespaceSelector: inFamilies, AdmissionReviewVersions: []string{"v1"}}},
	}, metav1.CreateOptions{})
	must("create mutating webhook", err)
	w.take()

	// 1. Version skew: each client names its release in its user agent.
	skew := []struct {
		user  familyUser
		agent string
		paths []string
	}{
		{nodeOld, agentKubeletOld, []string{"/api/v1/nodes/node-old", "/api/v1/namespaces/default/pods"}},
		{nodeNew, agentKubeletNew, []string{"/api/v1/nodes/node-new", "/api/v1/namespaces/default/pods"}},
		{kubeProxy, agentKubeProxy, []string{"/api/v1/services", "/api/v1/nodes/node-old"}},
		{alice, agentKubectlOld, []string{"/api/v1/namespaces/default/pods", "/api/v1/namespaces/families/pods"}},
		{alice, agentKubectlNew, []string{"/api/v1/namespaces/default/pods", "/api/v1/namespaces/families/pods"}},
		{controllerMgr, agentCM, []string{"/api/v1/namespaces", "/api/v1/nodes"}},
		{scheduler, agentScheduler, []string{"/api/v1/nodes", "/api/v1/namespaces/default/pods"}},
		{mallory, agentFakeKubelet, []string{"/api/v1/nodes/node-old", "/api/v1/namespaces/default/pods"}},
	}
	for _, c := range skew {
		for _, p := range c.paths {
			// Any audited answer will do (the node and mallory are forbidden some of these).
			_ = as(c.user, c.agent).RESTClient().Get().AbsPath(p).Do(ctx).Error()
		}
	}
	w.take()

	// 2. Node runtimes, registered by admin with the status a kubelet reports.
	for _, n := range []struct{ name, runtime, kubelet string }{
		{"node-containerd1", "containerd://1.7.22", "v1.33.4"},
		{"node-containerd2", "containerd://2.1.4", "v1.37.2"},
	} {
		_, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name},
			Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{ContainerRuntimeVersion: n.runtime, KubeletVersion: n.kubelet,
				OperatingSystem: "linux", Architecture: "amd64"}}}, metav1.CreateOptions{})
		create("node "+n.name, err)
	}

	// 3. Request bodies.
	port := []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}
	preferClose, sameZone := "PreferClose", "PreferSameZone"
	for _, svc := range []corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "external-ips"}, Spec: corev1.ServiceSpec{Ports: port, ExternalIPs: []string{"203.0.113.10"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "prefer-close"}, Spec: corev1.ServiceSpec{Ports: port, TrafficDistribution: &preferClose}},
		{ObjectMeta: metav1.ObjectMeta{Name: "near-miss-same-zone"}, Spec: corev1.ServiceSpec{Ports: port, TrafficDistribution: &sameZone}},
		{ObjectMeta: metav1.ObjectMeta{Name: "near-miss-plain"}, Spec: corev1.ServiceSpec{Ports: port, Type: corev1.ServiceTypeClusterIP}},
	} {
		_, err := admin.CoreV1().Services(familiesNS).Create(ctx, &svc, metav1.CreateOptions{})
		create("service "+svc.Name, err)
	}
	gitRepo := corev1.Volume{Name: "src", VolumeSource: corev1.VolumeSource{GitRepo: &corev1.GitRepoVolumeSource{Repository: "https://example.com/repo.git"}}}
	withVolume := func(v corev1.Volume) corev1.PodSpec {
		return corev1.PodSpec{Volumes: []corev1.Volume{v}, Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1",
			VolumeMounts: []corev1.VolumeMount{{Name: v.Name, MountPath: "/src"}}}}}
	}
	_, err = admin.CoreV1().Pods(familiesNS).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "git-repo"}, Spec: withVolume(gitRepo)}, metav1.CreateOptions{})
	create("pod git-repo", err)
	labels := map[string]string{"app": "git-repo-deploy"}
	_, err = admin.AppsV1().Deployments(familiesNS).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "git-repo-deploy"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: withVolume(gitRepo)}}}, metav1.CreateOptions{})
	create("deployment git-repo-deploy", err)
	emptyDir := corev1.Volume{Name: "src", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	_, err = admin.CoreV1().Pods(familiesNS).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "near-miss-emptydir"}, Spec: withVolume(emptyDir)}, metav1.CreateOptions{})
	create("pod near-miss-emptydir", err)
	for _, ic := range []networkingv1.IngressClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "nginx"}, Spec: networkingv1.IngressClassSpec{Controller: "k8s.io/ingress-nginx"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "near-miss-traefik"}, Spec: networkingv1.IngressClassSpec{Controller: "traefik.io/ingress-controller"}},
	} {
		_, err := admin.NetworkingV1().IngressClasses().Create(ctx, &ic, metav1.CreateOptions{})
		create("ingressclass "+ic.Name, err)
	}
	_, err = as(ingressNginx, agentIngress).NetworkingV1().Ingresses("").List(ctx, metav1.ListOptions{})
	must("list ingresses as ingress-nginx", err)
	w.take()

	// 4. Drains: a PDB that allows no disruption, as its controller would report it, over a
	// running, ready pod (pending pods are evicted whatever the budget).
	_, err = admin.PolicyV1().PodDisruptionBudgets(familiesNS).Create(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "block-drain"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: new(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "drain"}}}},
		metav1.CreateOptions{})
	must("create PDB", err)
	pdb, err := admin.PolicyV1().PodDisruptionBudgets(familiesNS).Get(ctx, "block-drain", metav1.GetOptions{})
	must("get PDB", err)
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, DisruptionsAllowed: 0, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	_, err = admin.PolicyV1().PodDisruptionBudgets(familiesNS).UpdateStatus(ctx, pdb, metav1.UpdateOptions{})
	must("update PDB status", err)
	for _, p := range []struct{ name, app string }{{"drain-me", "drain"}, {"near-miss-no-pdb", "no-pdb"}} {
		pod, err := admin.CoreV1().Pods(familiesNS).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name, Labels: map[string]string{"app": p.app}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}, metav1.CreateOptions{})
		must("create pod "+p.name, err)
		pod.Status.Phase = corev1.PodRunning
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		_, err = admin.CoreV1().Pods(familiesNS).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		must("update pod status "+p.name, err)
	}
	evict := func(pod string) error {
		return as(drainer, agentDrain).CoreV1().Pods(familiesNS).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: familiesNS}})
	}
	if err := evict("drain-me"); !apierrors.IsTooManyRequests(err) {
		t.Errorf("evicting drain-me past block-drain: %v, want 429", err)
	}
	must("evict near-miss-no-pdb", evict("near-miss-no-pdb"))

	// Webhooks failing open: the validating one on a ConfigMap in families, the mutating one
	// on a Secret there; near miss: a ConfigMap in another namespace.
	_, err = admin.CoreV1().ConfigMaps(familiesNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unreachable-webhook"}}, metav1.CreateOptions{})
	create("configmap unreachable-webhook", err)
	_, err = admin.CoreV1().Secrets(familiesNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "unreachable-mutator"}}, metav1.CreateOptions{})
	create("secret unreachable-mutator", err)
	_, err = admin.CoreV1().ConfigMaps("families-other").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "near-miss-webhook"}}, metav1.CreateOptions{})
	create("configmap near-miss-webhook", err)

	// 5. nodes/proxy, which no kubelet answers here; near miss: the node itself.
	var proxyCode int
	as(metricsScraper, agentPrometheus).RESTClient().Get().AbsPath("/api/v1/nodes/node-containerd2/proxy/metrics").Do(ctx).StatusCode(&proxyCode)
	_, err = as(metricsScraper, agentPrometheus).CoreV1().Nodes().Get(ctx, "node-containerd2", metav1.GetOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("metrics-scraper get node: %v, want forbidden (it may only proxy)", err)
	}

	// 6. An enumerator (Argo CD's agent) reading the deprecated core v1 Endpoints, and then
	// writing one: the read blocks nothing, the write is a deprecated-API finding.
	argo := as(familyUser{}, agentArgo)
	_, err = argo.CoreV1().Endpoints(familiesNS).List(ctx, metav1.ListOptions{}) //nolint:staticcheck // the deprecated API is the case
	must("list endpoints as Argo CD", err)
	_, err = argo.CoreV1().Endpoints(familiesNS).Create(ctx, &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "argo-written"}}, metav1.CreateOptions{}) //nolint:staticcheck // the deprecated API is the case
	must("create endpoints argo-written as Argo CD", err)
	// Premise: the apiserver warns of the deprecation to the client (never in the audit log).
	if ws := w.take(); !slices.ContainsFunc(ws, func(s string) bool { return strings.Contains(s, "v1 Endpoints is deprecated in v1.33+") }) {
		t.Errorf("Argo CD's endpoints requests: warnings %q, want the deprecation", ws)
	}

	// 7. IPs and CIDRs that strict validation (on by default since 1.36) refuses: each write
	// is answered 422 and logged with its body. Near misses: the canonical forms, accepted.
	lb := corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: port}
	for _, c := range []struct {
		name   string
		ranges []string
		ok     bool
	}{{"strict-source-ranges", []string{"10.0.0.1/8", "192.168.001.0/24"}, false}, {"near-miss-source-ranges", []string{"10.0.0.0/8"}, true}} {
		spec := lb
		spec.LoadBalancerSourceRanges = c.ranges
		_, err := admin.CoreV1().Services(familiesNS).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: c.name}, Spec: spec}, metav1.CreateOptions{})
		strictCase(t, "service "+c.name, err, c.ok)
	}
	for _, c := range []struct {
		name, cidr string
		ok         bool
	}{{"strict-cidr", "192.168.1.1/24", false}, {"near-miss-cidr", "192.168.1.0/24", true}} {
		_, err := admin.NetworkingV1().NetworkPolicies(familiesNS).Create(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: c.name},
			Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: c.cidr}}}}}}},
			metav1.CreateOptions{})
		strictCase(t, "networkpolicy "+c.name, err, c.ok)
	}
	for _, c := range []struct {
		name, ip string
		ok       bool
	}{{"strict-host-alias", "010.1.2.3", false}, {"near-miss-host-alias", "10.1.2.3", true}} {
		_, err := admin.CoreV1().Pods(familiesNS).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: c.name},
			Spec: corev1.PodSpec{HostAliases: []corev1.HostAlias{{IP: c.ip, Hostnames: []string{"legacy.example"}}},
				Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}, metav1.CreateOptions{})
		strictCase(t, "pod "+c.name, err, c.ok)
	}
	w.take()

	// 8. A Windows pod on the host's network without HostProcess containers (the deprecated
	// alpha); near miss: a Linux pod on the host's network.
	for _, c := range []struct {
		name string
		os   corev1.OSName
	}{{"windows-host-network", corev1.Windows}, {"near-miss-linux-host-network", corev1.Linux}} {
		_, err := admin.CoreV1().Pods(familiesNS).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: c.name},
			Spec: corev1.PodSpec{OS: &corev1.PodOS{Name: c.os}, HostNetwork: true,
				Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}, metav1.CreateOptions{})
		create("pod "+c.name, err)
	}

	// 9. The warnings node components write about themselves at start: node-old's kubelet
	// on cgroup v1 (a core v1 Event, as the kubelet's recorder writes it) and kube-proxy in
	// ipvs mode (events.k8s.io/v1). Near misses: node-new's ordinary Starting event, and
	// mallory writing a CgroupV1 event about node-new.
	nodeEvent := func(node, reason, message string) *corev1.Event {
		now := metav1.Now()
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: node + "." + strings.ToLower(reason), Namespace: "default"},
			InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: node, UID: types.UID(node)}, Reason: reason, Message: message,
			Type: corev1.EventTypeWarning, Source: corev1.EventSource{Component: "kubelet", Host: node}, FirstTimestamp: now, LastTimestamp: now, Count: 1}
	}
	_, err = as(nodeOld, agentKubeletOld).CoreV1().Events("default").Create(ctx, nodeEvent("node-old", "CgroupV1", cgroupV1Warning), metav1.CreateOptions{})
	must("create the CgroupV1 event as node-old's kubelet", err)
	starting := nodeEvent("node-new", "Starting", "Starting kubelet.")
	starting.Type = corev1.EventTypeNormal
	_, err = as(nodeNew, agentKubeletNew).CoreV1().Events("default").Create(ctx, starting, metav1.CreateOptions{})
	must("create the Starting event as node-new's kubelet", err)
	if _, err := as(mallory, agentFakeKubelet).CoreV1().Events("default").Create(ctx, nodeEvent("node-new", "CgroupV1", cgroupV1Warning), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("mallory's CgroupV1 event: %v, want forbidden", err)
	}
	_, err = as(kubeProxy, agentKubeProxy).EventsV1().Events("default").Create(ctx, &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "node-old.ipvsdeprecation", Namespace: "default"}, EventTime: metav1.NowMicro(),
		Regarding: corev1.ObjectReference{Kind: "Node", Name: "node-old", UID: types.UID("node-old")}, Reason: "IPVSDeprecation",
		Action: "StartKubeProxy", Note: ipvsWarning, Type: corev1.EventTypeWarning, ReportingController: "kube-proxy", ReportingInstance: "kube-proxy-node-old",
	}, metav1.CreateOptions{})
	must("create the IPVSDeprecation event as kube-proxy", err)

	// 10. Ingresses written for ingress-nginx (its annotations); near miss: traefik's.
	pathType := networkingv1.PathTypePrefix
	backend := networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: "web.example", IngressRuleValue: networkingv1.IngressRuleValue{
		HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: &pathType,
			Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}}}}}}}}}
	for _, c := range []struct {
		name string
		ann  map[string]string
	}{
		{"nginx-annotated", map[string]string{"nginx.ingress.kubernetes.io/rewrite-target": "/", "nginx.ingress.kubernetes.io/ssl-redirect": "false"}},
		{"near-miss-traefik", map[string]string{"traefik.ingress.kubernetes.io/router.entrypoints": "web"}},
	} {
		_, err := admin.NetworkingV1().Ingresses(familiesNS).Create(ctx, &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: c.name, Annotations: c.ann}, Spec: backend}, metav1.CreateOptions{})
		create("ingress "+c.name, err)
	}

	// 11. Rollback readiness: a trust tool writes a ClusterTrustBundle through
	// certificates.k8s.io/v1, which 1.37 introduced (GA; v1beta1 before it). Near miss: the
	// controller manager reading it, which goes back with the control plane.
	bundle := &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "families-root"},
		Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: selfSignedPEM(t, "families root")}}
	_, err = as(familyUser{}, agentTrust).CertificatesV1().ClusterTrustBundles().Create(ctx, bundle, metav1.CreateOptions{})
	create("clustertrustbundle as a trust tool", err)
	_, err = as(controllerMgr, agentCM).CertificatesV1().ClusterTrustBundles().List(ctx, metav1.ListOptions{})
	must("list clustertrustbundles as the controller manager", err)

	raw, err := os.ReadFile(auditLog)
	must("read audit log", err)
	// A line the apiserver may be writing as we read is not one yet.
	raw = raw[:bytes.LastIndexByte(raw, '\n')+1]
	checkFamilyPremises(t, parseAudit(t, raw), warned, proxyCode)
	if *update && !t.Failed() {
		must("write fixture", os.WriteFile(familiesFixture, raw, 0o644))
	}
	scanFamilies(t, auditLog)
}

// The warnings of the kubelet on cgroup v1 and of kube-proxy in ipvs mode, as 1.37 writes them
// (pkg/kubelet/cm/container_manager.go, cmd/kube-proxy/app/server_linux.go).
const (
	cgroupV1Warning = "cgroup v1 detected. cgroup v1 support is deprecated and will be removed in a future release. Please migrate to cgroup v2. " +
		"More information at https://git.k8s.io/enhancements/keps/sig-node/5573-remove-cgroup-v1"
	ipvsWarning = "The ipvs proxier has been deprecated and will be disabled by default in Kubernetes 1.40 and removed in Kubernetes 1.43. " +
		"Migrate to the 'nftables' proxier instead."
)

// strictCase checks the answer to a write of strict validation's case: refused as invalid,
// or (a near miss) accepted.
func strictCase(t *testing.T, what string, err error, ok bool) {
	t.Helper()
	if ok && err != nil {
		t.Fatalf("create %s: %v", what, err)
	}
	if !ok && !apierrors.IsInvalid(err) {
		t.Errorf("create %s: %v, want refused as invalid (StrictIPCIDRValidation)", what, err)
	}
}

// scanFamilies runs classify scan on the live log for an upgrade from 1.37 to 1.38: the
// kube-proxy 1.34 is what 1.38 breaks; the kubelet 1.33, the gitRepo volumes and the
// containerd 1.7 node fail already at 1.37; the deprecations (externalIPs, PreferClose) and
// the checks tied to no release (drains, webhooks, nodes/proxy, ingress-nginx, kubectl) are
// findings that block nothing.
func scanFamilies(t *testing.T, auditLog string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "classify")
	build := exec.Command("go", "build", "-o", bin, "./cmd/classify")
	build.Dir = filepath.Join("..", "..", "services", "classify")
	build.Env = append(os.Environ(), "GOWORK=off")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build classify: %v\n%s", err, b)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "scan", "--current-version", "1.37", "--target-version", "1.38", "--format", "json", auditLog)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if code := exitCode(cmd.Run()); code != 3 {
		t.Fatalf("classify scan: exit %d, want 3\n%s", code, stderr.String())
	}
	rulesSeen := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var f struct {
			RuleID string `json:"rule_id"`
		}
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			t.Fatalf("classify scan line %q: %v", line, err)
		}
		rulesSeen[f.RuleID]++
	}
	for rule, n := range map[string]int{"version-skew": 3, "kubectl-version-skew": 3, "node-container-runtime": 1, "gitrepo-volume": 2,
		"service-external-ips": 1, "service-prefer-close": 1, "ingress-nginx": 3, "eviction-blocked": 1, "webhook-failed-open": 2, "nodes-proxy": 1,
		"enumerator-read": 1, "strict-ip-cidr": 3, "windows-host-network": 1, "node-cgroup-v1": 1, "kube-proxy-ipvs": 1, "rollback-api": 1} {
		if rulesSeen[rule] != n {
			t.Errorf("classify scan: %d %s findings, want %d (all: %v)", rulesSeen[rule], rule, n, rulesSeen)
		}
	}
	for _, want := range []string{
		"blocking an upgrade from 1.37 to 1.38 (1 new in 1.38, 8 failing now)",
		"Breaks on the upgrade to 1.38 (removed after 1.37, the cluster's release, at or before 1.38): 1 blocker, 1 finding\n" +
			"  kube-proxy 1.34 (version-skew)",
		"kubelet 1.33 (version-skew)",
		"A rollback to 1.36 breaks what uses the APIs 1.37 introduced (rollback-api): 1 API\n" +
			"  certificates.k8s.io/v1 clustertrustbundles: 1 caller (admin  " + agentTrust + ")",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("classify scan's summary lacks %q:\n%s", want, stderr.String())
		}
	}
}

// auditEvent holds the fields of an audit.k8s.io/v1 Event the premises read.
type auditEvent struct {
	Stage      string `json:"stage"`
	RequestURI string `json:"requestURI"`
	Verb       string `json:"verb"`
	User       struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
	} `json:"user"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus *metav1.Status    `json:"responseStatus"`
	RequestObject  json.RawMessage   `json:"requestObject"`
	Annotations    map[string]string `json:"annotations"`
	Level          string            `json:"level"`
}

func (e auditEvent) ref() string {
	if e.ObjectRef == nil {
		return ""
	}
	r := e.ObjectRef
	return strings.Join([]string{r.APIGroup, r.Resource, r.Namespace, r.Name, r.Subresource}, "/")
}

func (e auditEvent) code() int32 {
	if e.ResponseStatus == nil {
		return 0
	}
	return e.ResponseStatus.Code
}

func parseAudit(t *testing.T, raw []byte) []auditEvent {
	t.Helper()
	var evs []auditEvent
	for i, line := range strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n") {
		var e auditEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("audit log line %d: %v", i+1, err)
		}
		evs = append(evs, e)
	}
	return evs
}

// checkFamilyPremises checks, on the apiserver's own events, the facts each rule family reads.
func checkFamilyPremises(t *testing.T, evs []auditEvent, warned map[string][]string, proxyCode int) {
	t.Helper()
	// one is the single ResponseComplete event of verb on ref ("group/resource/ns/name/sub")
	// sent by user.
	one := func(user, verb, ref string) auditEvent {
		t.Helper()
		var got []auditEvent
		for _, e := range evs {
			if e.Stage == "ResponseComplete" && e.User.Username == user && e.Verb == verb && e.ref() == ref {
				got = append(got, e)
			}
		}
		if len(got) != 1 {
			t.Fatalf("%d events of %s %s %s, want 1", len(got), user, verb, ref)
		}
		return got[0]
	}
	body := func(e auditEvent) map[string]any {
		t.Helper()
		var m map[string]any
		if err := json.Unmarshal(e.RequestObject, &m); err != nil {
			t.Fatalf("requestObject of %s %s: %v (level %s)", e.Verb, e.ref(), err, e.Level)
		}
		return m
	}

	// 1. Each skew client's agent is on its events, with the groups that say what it is.
	for _, c := range []struct {
		user   familyUser
		agent  string
		node   bool
		events int
	}{
		// node-old, node-new, kube-proxy and mallory also write an event each (case 9); the
		// controller manager lists the ClusterTrustBundles (case 11).
		{nodeOld, agentKubeletOld, true, 3}, {nodeNew, agentKubeletNew, true, 3}, {kubeProxy, agentKubeProxy, false, 3},
		{alice, agentKubectlOld, false, 2}, {alice, agentKubectlNew, false, 2}, {controllerMgr, agentCM, false, 3},
		{scheduler, agentScheduler, false, 2}, {mallory, agentFakeKubelet, false, 3},
	} {
		n := 0
		for _, e := range evs {
			if e.User.Username != c.user.name || e.UserAgent != c.agent {
				continue
			}
			n++
			if isNode := slices.Contains(e.User.Groups, "system:nodes"); isNode != c.node {
				t.Errorf("%s (%s): groups %v", c.user.name, c.agent, e.User.Groups)
			}
		}
		if n != c.events {
			t.Errorf("%s with %q: %d events, want %d", c.user.name, c.agent, n, c.events)
		}
	}

	// 11. The trust tool's bundle went through certificates.k8s.io/v1 and was stored (201).
	stored := slices.ContainsFunc(evs, func(e auditEvent) bool {
		return e.UserAgent == agentTrust && e.Verb == "create" && e.ObjectRef != nil && e.ObjectRef.Resource == "clustertrustbundles" &&
			strings.HasPrefix(e.RequestURI, "/apis/certificates.k8s.io/v1/") && e.code() == 201
	})
	if !stored {
		t.Error("no create of a ClusterTrustBundle through certificates.k8s.io/v1 answered 201")
	}

	// 2. The node's create carries the runtime and kubelet it registers with.
	for _, n := range []struct{ name, runtime, kubelet string }{
		{"node-containerd1", "containerd://1.7.22", "v1.33.4"}, {"node-containerd2", "containerd://2.1.4", "v1.37.2"},
	} {
		e := one("admin", "create", "/nodes//"+n.name+"/")
		info := dig(body(e), "status", "nodeInfo")
		if e.code() != http.StatusCreated || info == nil || info.(map[string]any)["containerRuntimeVersion"] != n.runtime ||
			info.(map[string]any)["kubeletVersion"] != n.kubelet {
			t.Errorf("create node %s: %d, nodeInfo %v", n.name, e.code(), info)
		}
	}

	// 3. Bodies: what the rules read is in requestObject, and the apiserver accepted it.
	for _, c := range []struct {
		ref, path string
		want      any
	}{
		{"/services/families/external-ips/", "spec.externalIPs", []any{"203.0.113.10"}},
		{"/services/families/prefer-close/", "spec.trafficDistribution", "PreferClose"},
		{"/services/families/near-miss-same-zone/", "spec.trafficDistribution", "PreferSameZone"},
		{"/services/families/near-miss-plain/", "spec.externalIPs", nil},
		{"/services/families/near-miss-plain/", "spec.trafficDistribution", nil},
		{"/pods/families/git-repo/", "spec.volumes", []any{map[string]any{"name": "src", "gitRepo": map[string]any{"repository": "https://example.com/repo.git"}}}},
		{"apps/deployments/families/git-repo-deploy/", "spec.template.spec.volumes", []any{map[string]any{"name": "src", "gitRepo": map[string]any{"repository": "https://example.com/repo.git"}}}},
		{"/pods/families/near-miss-emptydir/", "spec.volumes", []any{map[string]any{"name": "src", "emptyDir": map[string]any{}}}},
		{"networking.k8s.io/ingressclasses//nginx/", "spec.controller", "k8s.io/ingress-nginx"},
		{"networking.k8s.io/ingressclasses//near-miss-traefik/", "spec.controller", "traefik.io/ingress-controller"},
	} {
		e := one("admin", "create", c.ref)
		if got := dig(body(e), strings.Split(c.path, ".")...); e.code() != http.StatusCreated || !jsonEqual(got, c.want) {
			t.Errorf("create %s: %d, %s = %v, want %v", c.ref, e.code(), c.path, got, c.want)
		}
	}
	if e := one(ingressNginx.name, "list", "networking.k8s.io/ingresses///"); e.UserAgent != agentIngress || e.code() != http.StatusOK ||
		!slices.Contains(e.User.Groups, "system:serviceaccounts:ingress-nginx") {
		t.Errorf("ingress-nginx list: %s, %d, groups %v", e.UserAgent, e.code(), e.User.Groups)
	}

	// 4. The eviction past the budget is answered 429 naming it; the one no budget covers is
	// carried out.
	e := one(drainer.name, "create", "/pods/families/drain-me/eviction")
	if st := e.ResponseStatus; e.code() != http.StatusTooManyRequests || st.Reason != metav1.StatusReasonTooManyRequests ||
		st.Message != "Cannot evict pod as it would violate the pod's disruption budget." || st.Details == nil ||
		!slices.ContainsFunc(st.Details.Causes, func(c metav1.StatusCause) bool {
			return c.Type == policyv1.DisruptionBudgetCause && c.Message == "The disruption budget block-drain needs 1 healthy pods and has 1 currently"
		}) || e.UserAgent != agentDrain {
		t.Errorf("eviction of drain-me: %s %+v", e.UserAgent, st)
	}
	if e := one(drainer.name, "create", "/pods/families/near-miss-no-pdb/eviction"); e.code() != http.StatusCreated {
		t.Errorf("eviction of near-miss-no-pdb: %+v", e.ResponseStatus)
	}
	// The webhooks that nobody answers fail open, and the apiserver says so on the event.
	// The mutating one also leaves the annotation every mutating webhook call does.
	for _, c := range []struct {
		ref  string
		want map[string]string
	}{
		{"/configmaps/families/unreachable-webhook/", map[string]string{
			"failed-open.validating.webhook.admission.k8s.io/round_0_index_0": "unreachable-policy.example.com"}},
		{"/secrets/families/unreachable-mutator/", map[string]string{
			"failed-open.mutation.webhook.admission.k8s.io/round_0_index_0": "unreachable-mutator.example.com",
			"mutation.webhook.admission.k8s.io/round_0_index_0": `{"configuration":"unreachable-mutator.example.com",` +
				`"webhook":"unreachable-mutator.example.com","mutated":false}`}},
	} {
		e := one("admin", "create", c.ref)
		if e.code() != http.StatusCreated {
			t.Errorf("create %s: %d", c.ref, e.code())
		}
		for k, v := range c.want {
			if e.Annotations[k] != v {
				t.Errorf("create %s: annotation %s = %q, want %q (all: %v)", c.ref, k, e.Annotations[k], v, e.Annotations)
			}
		}
	}
	if e := one("admin", "create", "/configmaps/families-other/near-miss-webhook/"); hasPrefixKey(e.Annotations, "failed-open.") {
		t.Errorf("the near miss was sent to a webhook: %v", e.Annotations)
	}

	// 5. nodes/proxy is its own subresource, logged twice (a proxied request is long-running:
	// ResponseStarted, then ResponseComplete); the node's get is not.
	var stages []string
	for _, e := range evs {
		if e.User.Username == metricsScraper.name && e.ObjectRef != nil && e.ObjectRef.Subresource == "proxy" {
			stages = append(stages, e.Stage)
		}
	}
	if !slices.Equal(stages, []string{"ResponseStarted", "ResponseComplete"}) {
		t.Errorf("nodes/proxy stages: %v", stages)
	}
	if e := one(metricsScraper.name, "get", "/nodes//node-containerd2/proxy"); e.UserAgent != agentPrometheus || int(e.code()) != proxyCode ||
		!strings.HasSuffix(e.RequestURI, "/proxy/metrics") {
		t.Errorf("nodes/proxy: %s %s %d (client saw %d)", e.UserAgent, e.RequestURI, e.code(), proxyCode)
	}
	if e := one(metricsScraper.name, "get", "/nodes//node-containerd2/"); e.code() != http.StatusForbidden {
		t.Errorf("get node as metrics-scraper: %d", e.code())
	}

	// 7-10. Strict validation refuses the non-standard values (422) and the request body is
	// logged all the same; the near misses, the Windows pods and the Ingresses are created.
	for _, c := range []struct {
		ref, path string
		want      any
		code      int32
	}{
		{"/services/families/strict-source-ranges/", "spec.loadBalancerSourceRanges", []any{"10.0.0.1/8", "192.168.001.0/24"}, http.StatusUnprocessableEntity},
		{"/services/families/near-miss-source-ranges/", "spec.loadBalancerSourceRanges", []any{"10.0.0.0/8"}, http.StatusCreated},
		{"networking.k8s.io/networkpolicies/families/strict-cidr/", "spec.ingress", []any{map[string]any{"from": []any{map[string]any{"ipBlock": map[string]any{"cidr": "192.168.1.1/24"}}}}}, http.StatusUnprocessableEntity},
		{"networking.k8s.io/networkpolicies/families/near-miss-cidr/", "spec.ingress", []any{map[string]any{"from": []any{map[string]any{"ipBlock": map[string]any{"cidr": "192.168.1.0/24"}}}}}, http.StatusCreated},
		{"/pods/families/strict-host-alias/", "spec.hostAliases", []any{map[string]any{"ip": "010.1.2.3", "hostnames": []any{"legacy.example"}}}, http.StatusUnprocessableEntity},
		{"/pods/families/near-miss-host-alias/", "spec.hostAliases", []any{map[string]any{"ip": "10.1.2.3", "hostnames": []any{"legacy.example"}}}, http.StatusCreated},
		{"/pods/families/windows-host-network/", "spec.os", map[string]any{"name": "windows"}, http.StatusCreated},
		{"/pods/families/near-miss-linux-host-network/", "spec.hostNetwork", true, http.StatusCreated},
		{"networking.k8s.io/ingresses/families/nginx-annotated/", "metadata.annotations",
			map[string]any{"nginx.ingress.kubernetes.io/rewrite-target": "/", "nginx.ingress.kubernetes.io/ssl-redirect": "false"}, http.StatusCreated},
		{"networking.k8s.io/ingresses/families/near-miss-traefik/", "metadata.annotations",
			map[string]any{"traefik.ingress.kubernetes.io/router.entrypoints": "web"}, http.StatusCreated},
	} {
		e := one("admin", "create", c.ref)
		if got := dig(body(e), strings.Split(c.path, ".")...); e.code() != c.code || !jsonEqual(got, c.want) {
			t.Errorf("create %s: %d, %s = %v, want %d and %v", c.ref, e.code(), c.path, got, c.code, c.want)
		}
	}
	// The components' events reach the log with their bodies (Request level for nodes and
	// kube-proxy); mallory's is refused by the Node authorizer and logged at Metadata.
	for _, c := range []struct {
		user, ref, reason string
	}{
		{nodeOld.name, "/events/default/node-old.cgroupv1/", "CgroupV1"},
		{nodeNew.name, "/events/default/node-new.starting/", "Starting"},
		{kubeProxy.name, "events.k8s.io/events/default/node-old.ipvsdeprecation/", "IPVSDeprecation"},
	} {
		e := one(c.user, "create", c.ref)
		if e.code() != http.StatusCreated || e.Level != "Request" || dig(body(e), "reason") != c.reason {
			t.Errorf("%s's event %s: %d at %s, reason %v", c.user, c.ref, e.code(), e.Level, dig(body(e), "reason"))
		}
	}
	// (A refused create is logged before its body is decoded: no name in objectRef.)
	if e := one(mallory.name, "create", "/events/default//"); e.code() != http.StatusForbidden || e.Level != "Metadata" {
		t.Errorf("mallory's event: %d at %s", e.code(), e.Level)
	}

	// The apiserver accepts the deprecated fields (201 above) and warns the client.
	gitRepoWarning := "volumes[0].gitRepo: deprecated in v1.11, and disabled by default in v1.33+"
	wantWarnings := map[string][]string{
		"service external-ips":       {"spec.externalIPs is deprecated and may no longer be implemented in some clusters"},
		"service prefer-close":       {`spec.trafficDistribution: "PreferClose" is deprecated; use "PreferSameZone"`},
		"pod git-repo":               {"spec." + gitRepoWarning},
		"deployment git-repo-deploy": {"spec.template.spec." + gitRepoWarning},
	}
	for what, got := range warned {
		if !slices.Equal(got, wantWarnings[what]) {
			t.Errorf("warnings on create %s: %q, want %q", what, got, wantWarnings[what])
		}
	}
}

// dig is the value at path in a decoded JSON object (nil when absent).
func dig(v any, path ...string) any {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func jsonEqual(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return errors.Join(err1, err2) == nil && bytes.Equal(x, y)
}

func hasPrefixKey(m map[string]string, prefix string) bool {
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}
