package rules

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/kubeversion"
)

// classifyLine decodes one audit event and returns its findings' rule ids and audit ids.
func classifyLine(t *testing.T, e *Engine, line string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := auditevent.NewDecoder(0).Decode([]byte(line), func(ev *auditevent.Event) error {
		for _, m := range e.Classify(ev, nil) {
			out[m.Rule.ID] = e.Finding(ev, &m, "c", "").AuditId
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSightingOncePerCallerAndDay: a kubelet polling all day is one finding key a day (the
// de-duplication of stages then keeps one finding), a new day or another node a new one.
func TestSightingOncePerCallerAndDay(t *testing.T) {
	e := mustEngine(t)
	kubelet := func(id, node, at, agent string) string {
		return fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":%q,"stage":"ResponseComplete",`+
			`"verb":"update","requestURI":"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/%s",`+
			`"user":{"username":"system:node:%s","groups":["system:nodes"]},"userAgent":%q,`+
			`"objectRef":{"resource":"leases","namespace":"kube-node-lease","name":%q,"apiGroup":"coordination.k8s.io","apiVersion":"v1"},`+
			`"responseStatus":{"code":200},"requestReceivedTimestamp":%q}`, id, node, node, agent, node, at)
	}
	const old = "kubelet/v1.33.4 (linux/amd64) kubernetes/74cdb42"
	a := classifyLine(t, e, kubelet("a1", "n1", "2026-12-05T00:00:01Z", old))[VersionSkew]
	b := classifyLine(t, e, kubelet("a2", "n1", "2026-12-05T23:59:59Z", old))[VersionSkew]
	c := classifyLine(t, e, kubelet("a3", "n1", "2026-12-06T00:00:00Z", old))[VersionSkew]
	d := classifyLine(t, e, kubelet("a4", "n2", "2026-12-05T12:00:00Z", old))[VersionSkew]
	up := classifyLine(t, e, kubelet("a5", "n1", "2026-12-05T12:00:00Z", "kubelet/v1.34.0 (linux/amd64) kubernetes/1"))[VersionSkew]
	if a == "" || a != b {
		t.Fatalf("one node, one day: keys %q and %q, want one", a, b)
	}
	for name, k := range map[string]string{"the next day": c, "another node": d, "the upgraded kubelet": up} {
		if k == "" || k == a {
			t.Errorf("%s: key %q, want a new one (not %q)", name, k, a)
		}
	}
}

// TestSkewSupports: the last kube-apiserver release that supports a kubelet, by the policy
// (three minor releases from kubelet 1.25 on, two before).
func TestSkewSupports(t *testing.T) {
	e := mustEngine(t)
	var kubelet SkewSpec
	for _, s := range e.Catalogue().VersionSkew {
		if s.Component == "kubelet" {
			kubelet = s
		}
	}
	for v, want := range map[string]string{"1.23": "1.25", "1.24": "1.26", "1.25": "1.28", "1.33": "1.36", "1.37": "1.40"} {
		if got := kubelet.Supports(kubeversion.MustParse(v)).String(); got != want {
			t.Errorf("kubelet %s: supported up to kube-apiserver %s, want %s", v, got, want)
		}
	}
}

// TestRuleSources: every rule, version-skew row and runtime row of the embedded catalogue
// names where its facts come from, and every rule says its family and the audit level it needs.
func TestRuleSources(t *testing.T) {
	c := mustEngine(t).Catalogue()
	for _, r := range c.Rules {
		if r.Source == "" || r.Family == "" || r.Level == "" {
			t.Errorf("rule %s: source %q, family %q, level %q: give all three", r.ID, r.Source, r.Family, r.Level)
		}
	}
	for _, s := range c.VersionSkew {
		if s.Source == "" {
			t.Errorf("version_skew %s has no source", s.Component)
		}
	}
	for _, r := range c.Runtimes {
		if r.Source == "" {
			t.Errorf("runtimes %s has no source", r.Prefix)
		}
	}
}

// TestRuleFamiliesOnGenuineEvents classifies the events a real kube-apiserver 1.37 wrote for
// the cases of deploy/kubetest's TestRuleFamilyEventsOnARealAPIServer (testdata/families-1.37.log,
// written by it with -update): each case gives exactly the finding below, once (the stages of
// one request and a caller's repeated requests merged by their key, as the pipeline does),
// and the near misses (node-new's kubelet within policy for 1.38, mallory's forged kubelet
// agent, containerd 2, PreferSameZone, an emptyDir pod, traefik, an eviction without a budget,
// a webhook in another namespace, a plain node read, canonical IPs and CIDRs, a Linux pod on
// the host's network, a node's ordinary event, mallory's forged CgroupV1 event, traefik's
// Ingress) nothing more; Argo CD's read of a deprecated version is an enumerator's.
func TestRuleFamiliesOnGenuineEvents(t *testing.T) {
	e := mustEngine(t)
	data, err := os.ReadFile("testdata/families-1.37.log")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var got []string
	d := auditevent.NewDecoder(4 << 20)
	for n, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		err := d.Decode(line, func(ev *auditevent.Event) error {
			for _, m := range e.Classify(ev, nil) {
				f := e.Finding(ev, &m, "c", "")
				if seen[f.AuditId+" "+f.RuleId] {
					continue
				}
				seen[f.AuditId+" "+f.RuleId] = true
				if f.RuleId == DeprecatedAPI || f.RuleId == RemovedAPI {
					continue // the API rules have their own corpus
				}
				got = append(got, fmt.Sprintf("%s %s %s/%s removed_in=%s detail=%s", f.RuleId, f.Username, f.Resource, f.Name, f.RemovedIn, m.Detail))
			}
			return nil
		})
		if err != nil {
			t.Fatalf("line %d: %v", n+1, err)
		}
	}
	want := []string{
		"version-skew system:node:node-old kubelet 1.33/node-old removed_in=1.37 detail=kubelet",
		"version-skew system:node:node-new kubelet 1.37/node-new removed_in=1.41 detail=kubelet",
		"version-skew system:kube-proxy kube-proxy 1.34/ removed_in=1.38 detail=kube-proxy",
		"kubectl-version-skew alice kubectl 1.35/ removed_in= detail=kubectl",
		"kubectl-version-skew alice kubectl 1.37/ removed_in= detail=kubectl",
		"kubectl-version-skew drainer kubectl 1.37/drain-me removed_in= detail=kubectl",
		"node-container-runtime admin nodes/node-containerd1 removed_in=1.36 detail=container runtime",
		"service-external-ips admin services/external-ips removed_in= detail=spec.externalIPs",
		"service-prefer-close admin services/prefer-close removed_in= detail=spec.trafficDistribution",
		"gitrepo-volume admin pods/git-repo removed_in=1.33 detail=volume src",
		"gitrepo-volume admin deployments/git-repo-deploy removed_in=1.33 detail=volume src",
		"ingress-nginx admin ingressclasses/nginx removed_in= detail=IngressClass spec.controller",
		"ingress-nginx system:serviceaccount:ingress-nginx:ingress-nginx ingresses/ removed_in= detail=the ingress-nginx controller's user agent",
		"eviction-blocked drainer pods/drain-me removed_in= detail=block-drain",
		"webhook-failed-open admin configmaps/unreachable-webhook removed_in= detail=failed-open.validating.webhook.admission.k8s.io/round_0_index_0",
		"webhook-failed-open admin secrets/unreachable-mutator removed_in= detail=failed-open.mutation.webhook.admission.k8s.io/round_0_index_0",
		"nodes-proxy metrics-scraper nodes/node-containerd2 removed_in= detail=node-containerd2",
		// Argo CD's list of the deprecated Endpoints (its create is a deprecated-api finding).
		"enumerator-read admin endpoints/ removed_in= detail=Argo CD's application controller",
		// Strict IP/CIDR validation: three writes the 1.37 apiserver refused (422).
		"strict-ip-cidr admin networkpolicies/strict-cidr removed_in=1.36 detail=spec.ingress[0].from[0].ipBlock.cidr",
		"strict-ip-cidr admin pods/strict-host-alias removed_in=1.36 detail=spec.hostAliases[0].ip",
		"strict-ip-cidr admin services/strict-source-ranges removed_in=1.36 detail=spec.loadBalancerSourceRanges[0], spec.loadBalancerSourceRanges[1]",
		"windows-host-network admin pods/windows-host-network removed_in= detail=spec.hostNetwork on a Windows pod",
		// The components' own warnings, by the node they are about.
		"node-cgroup-v1 system:node:node-old cgroup v1 nodes/node-old.cgroupv1 removed_in=1.35 detail=node-old",
		"kube-proxy-ipvs system:kube-proxy kube-proxy in ipvs mode/node-old.ipvsdeprecation removed_in=1.40 detail=node-old",
		"ingress-nginx admin ingresses/nginx-annotated removed_in= detail=Ingress annotations",
		// A ClusterTrustBundle written through certificates.k8s.io/v1, which 1.37 introduced
		// (the controller manager's list of it goes back with the control plane).
		"rollback-api admin clustertrustbundles/families-root removed_in= detail=create",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("findings on the genuine events:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
}
