// Package rules holds the rule catalogue (embedded YAML, overridable with --rules-file) and
// the engine that matches audit events against it.
package rules

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/template"

	"github.com/auditlens/auditlens/lib/kubeversion"
)

// SchemaVersion is the catalogue schema this binary reads.
const SchemaVersion = 1

// Stable rule ids (DESIGN.md). Ids are never renamed; more may be added.
const (
	RemovedAPI               = "removed-api"
	DeprecatedAPI            = "deprecated-api"
	PSP                      = "psp"
	SeccompAlphaAnnotation   = "seccomp-alpha-annotation"
	AppArmorAnnotation       = "apparmor-annotation"
	CSRKeyEnciphermentNonRSA = "csr-key-encipherment-non-rsa"
	BetaNodeLabel            = "beta-node-label"
	NodeRoleMasterLabel      = "node-role-master-label"
	ServiceTopologyKeys      = "service-topology-keys"
	PodSecurityViolation     = "pod-security-violation"
	LegacyAuthProviderClient = "legacy-auth-provider-client"
	LegacySAToken            = "legacy-sa-token"

	// What else breaks an upgrade: the node fleet, request bodies, drains and
	// admission webhooks.
	VersionSkew          = "version-skew"
	KubectlVersionSkew   = "kubectl-version-skew"
	NodeContainerRuntime = "node-container-runtime"
	GitRepoVolume        = "gitrepo-volume"
	ServiceExternalIPs   = "service-external-ips"
	ServicePreferClose   = "service-prefer-close"
	IngressNginx         = "ingress-nginx"
	EvictionBlocked      = "eviction-blocked"
	WebhookFailedOpen    = "webhook-failed-open"
	NodesProxy           = "nodes-proxy"
	StrictIPCIDR         = "strict-ip-cidr"
	WindowsHostNetwork   = "windows-host-network"
	NodeCgroupV1         = "node-cgroup-v1"
	KubeProxyIPVS        = "kube-proxy-ipvs"
	// RollbackAPI is a write through an API version that a recent release introduced: the
	// release below it cannot serve what was stored (rollback readiness).
	RollbackAPI = "rollback-api"
	// EnumeratorRead is a read of a removed or deprecated version by a tool that reads every
	// served version of a resource: it stops when the version goes, nothing to change.
	EnumeratorRead = "enumerator-read"
)

// BuiltinRuleIDs are the rules whose logic is in this package; the catalogue must define each.
var BuiltinRuleIDs = []string{
	RemovedAPI, DeprecatedAPI, PSP, SeccompAlphaAnnotation, AppArmorAnnotation,
	CSRKeyEnciphermentNonRSA, BetaNodeLabel, NodeRoleMasterLabel, ServiceTopologyKeys,
	PodSecurityViolation, LegacyAuthProviderClient, LegacySAToken,
	VersionSkew, KubectlVersionSkew, NodeContainerRuntime, GitRepoVolume, ServiceExternalIPs,
	ServicePreferClose, IngressNginx, EvictionBlocked, WebhookFailedOpen, NodesProxy, EnumeratorRead,
	StrictIPCIDR, WindowsHostNetwork, NodeCgroupV1, KubeProxyIPVS, RollbackAPI,
}

//go:embed catalogue.yaml
var embedded []byte

// generated is the API section, written by tools/catalogue (make catalogue).
//
//go:embed apis.generated.yaml
var generated []byte

// components are the removed versions of third-party CRDs, by component release.
//
//go:embed components.yaml
var components []byte

// Embedded returns the hand-written catalogue built into the binary.
func Embedded() []byte { return append([]byte(nil), embedded...) }

// EmbeddedAPIs returns the generated API section built into the binary.
func EmbeddedAPIs() []byte { return append([]byte(nil), generated...) }

// embeddedSources are the three documents of the built-in catalogue.
func embeddedSources() []Source {
	return []Source{{Name: "embedded catalogue", Data: embedded}, {Name: "embedded apis.generated.yaml", Data: generated},
		{Name: "embedded components.yaml", Data: components}}
}

// Catalogue is the rule catalogue file.
type Catalogue struct {
	SchemaVersion int `yaml:"schema_version"`
	// NewestRelease is the newest Kubernetes release the catalogue's data was read from
	// (generated); a later document may raise it.
	NewestRelease     string           `yaml:"newest_release"`
	Rules             []RuleSpec       `yaml:"rules"`
	APIs              []APISpec        `yaml:"apis"`
	Annotations       []AnnotationSpec `yaml:"annotations"`
	ObjectAnnotations []AnnotationSpec `yaml:"object_annotations"`
	Labels            []LabelSpec      `yaml:"labels"`
	BodyKinds         []BodyKindSpec   `yaml:"body_kinds"`
	Served            []ServedSpec     `yaml:"served"`
	// VersionSkew is the version-skew policy by component (version-skew, kubectl-version-skew).
	VersionSkew []SkewSpec `yaml:"version_skew"`
	// Runtimes are container runtime releases a kubelet stops supporting
	// (node-container-runtime).
	Runtimes []RuntimeSpec `yaml:"runtimes"`
	// Enumerators are the tools known to read every served version of a resource
	// (enumerator-read).
	Enumerators []EnumeratorSpec `yaml:"enumerators"`
}

// EnumeratorSpec is a tool that reads (get, list, watch) every served version of the
// resources it follows, known by its user (or a prefix, '*') or the start of its user agent.
type EnumeratorSpec struct {
	Name   string `yaml:"name"`
	User   string `yaml:"user"`
	Agent  string `yaml:"agent"`
	Source string `yaml:"source"`
}

func (s *EnumeratorSpec) matches(user, ua string) bool {
	if s.User != "" && !userIn([]string{s.User}, user) {
		return false
	}
	return s.Agent == "" || strings.HasPrefix(ua, s.Agent)
}

// RuleSpec describes one rule: how its findings are rated and worded.
type RuleSpec struct {
	ID           string `yaml:"id"`
	Severity     string `yaml:"severity"`   // info, warning or critical
	Confidence   string `yaml:"confidence"` // low, medium or high (default)
	DeprecatedIn string `yaml:"deprecated_in"`
	RemovedIn    string `yaml:"removed_in"`
	Replacement  string `yaml:"replacement"`
	// Message is a text/template over the finding (see catalogue.yaml's header).
	Message string `yaml:"message"`
	// Disabled switches the rule off.
	Disabled bool `yaml:"disabled"`
	// IgnoreUsers lists usernames whose requests never produce this rule's findings; a
	// trailing '*' matches a prefix.
	IgnoreUsers []string `yaml:"ignore_users"`
	// Family groups the rules for the docs and the catalogue listing: api, security, node,
	// request-body, version-skew, drain, webhook.
	Family string `yaml:"family"`
	// Level is the audit level the rule needs to see anything: Metadata, or Request (it
	// reads request bodies, which deploy/audit-policy.yaml logs for writes of some resources).
	Level string `yaml:"level"`
	// Source is where the rule's facts come from: a KEP, a pull request, a release note or
	// a documentation page (every rule of the embedded catalogue has one; TestRuleSources).
	Source string `yaml:"source"`
	// FeatureGate is the Kubernetes feature gate whose lifecycle dates the rule, where one
	// does: deploy/kubetest checks DeprecatedIn or RemovedIn against kube_features.go of the
	// Kubernetes release it builds.
	FeatureGate *FeatureGateSpec `yaml:"feature_gate"`

	tmpl *template.Template
	// msg is tmpl compiled (message.go), nil when it uses more than fields and ifs.
	msg []msgStep
}

// FeatureGateSpec names a feature gate. With BreaksWhen, RemovedIn is the first release whose
// default is that value (the old behaviour gone, or the new restriction on); without it,
// DeprecatedIn is the first release that marks the gate deprecated.
type FeatureGateSpec struct {
	Name       string `yaml:"name"`
	BreaksWhen *bool  `yaml:"breaks_when"`
}

// APISpec is one removed or deprecated API version.
type APISpec struct {
	// Component names the software whose CRD serves the API (cert-manager, istio, ...): its
	// DeprecatedIn and RemovedIn are releases of that component, not of Kubernetes.
	Component    string `yaml:"component"`
	Group        string `yaml:"group"`
	Version      string `yaml:"version"`
	Resource     string `yaml:"resource"`
	Kind         string `yaml:"kind"`
	DeprecatedIn string `yaml:"deprecated_in"`
	RemovedIn    string `yaml:"removed_in"`
	Replacement  string `yaml:"replacement"`
	Note         string `yaml:"note"`
	// Source says where the values come from (module version, tag, overlay line).
	Source string `yaml:"source"`
}

// GroupVersion is "group/version", or "version" for the core group.
func (a APISpec) GroupVersion() string { return groupVersion(a.Group, a.Version) }

// BodyKindSpec is a removed or deprecated version of a kind that is only ever the body of a
// subresource request (an Eviction posted to pods/eviction), matched on the body's apiVersion.
type BodyKindSpec struct {
	Group        string `yaml:"group"`
	Version      string `yaml:"version"`
	Kind         string `yaml:"kind"`
	Subresource  string `yaml:"subresource"`
	DeprecatedIn string `yaml:"deprecated_in"`
	RemovedIn    string `yaml:"removed_in"`
	Replacement  string `yaml:"replacement"`
	Source       string `yaml:"source"`
}

// ServedSpec is a resource the newest Kubernetes release serves: where a replacement is looked
// up by group and resource or kind.
type ServedSpec struct {
	Group    string `yaml:"group"`
	Version  string `yaml:"version"`
	Resource string `yaml:"resource"`
	Kind     string `yaml:"kind"`
	// IntroducedIn is the first release that has this version of the resource (unset: older
	// than the data): the release below it cannot serve what is written through it.
	IntroducedIn string `yaml:"introduced_in"`
}

// AnnotationSpec matches an annotation by exact key or by prefix.
type AnnotationSpec struct {
	Key          string `yaml:"key"`
	Prefix       string `yaml:"prefix"`
	Rule         string `yaml:"rule"`
	Severity     string `yaml:"severity"`
	DeprecatedIn string `yaml:"deprecated_in"`
	RemovedIn    string `yaml:"removed_in"`
	Replacement  string `yaml:"replacement"`
}

func (a AnnotationSpec) matches(key string) bool {
	if a.Key != "" {
		return key == a.Key
	}
	return strings.HasPrefix(key, a.Prefix)
}

func (a AnnotationSpec) id() string {
	if a.Key != "" {
		return "key " + a.Key
	}
	return "prefix " + a.Prefix
}

// LabelSpec is a deprecated node label (or taint key).
type LabelSpec struct {
	Key          string `yaml:"key"`
	Rule         string `yaml:"rule"`
	Severity     string `yaml:"severity"`
	DeprecatedIn string `yaml:"deprecated_in"`
	RemovedIn    string `yaml:"removed_in"`
	Replacement  string `yaml:"replacement"`
}

// SkewSpec is the version-skew policy of one component: how many minor releases it may trail
// kube-apiserver, known from the user agent it sends (kubelet/v1.33.4 ...).
type SkewSpec struct {
	Component string `yaml:"component"`
	Rule      string `yaml:"rule"`
	// Agent is the user agent's prefix before the version ("kubelet/").
	Agent string `yaml:"agent"`
	// Users may send the agent; a trailing '*' matches a prefix; empty: anyone. An agent
	// from anyone else is not believed (any client can write any user agent).
	Users []string `yaml:"users"`
	// Older is how many minor releases the component may trail kube-apiserver; releases of
	// the component before OlderBefore may trail it by OlderThen only.
	Older       int    `yaml:"older"`
	OlderBefore string `yaml:"older_before"`
	OlderThen   int    `yaml:"older_then"`
	// Newer is how many minor releases it may be ahead of kube-apiserver: a client (kubectl,
	// 1) is then reported with the releases it supports and blocks no upgrade; a component
	// that may never be newer (0: kubelet, kube-proxy) blocks the first release that no
	// longer supports it.
	Newer  int    `yaml:"newer"`
	Source string `yaml:"source"`

	// olderBefore is OlderBefore parsed (zero: none), set when the document is parsed.
	olderBefore kubeversion.Version
}

// Supports returns the last kube-apiserver release that supports the component at release
// v, by the policy.
func (s SkewSpec) Supports(v kubeversion.Version) kubeversion.Version {
	older := s.Older
	b := s.olderBefore
	if b.IsZero() && s.OlderBefore != "" {
		b, _ = kubeversion.Parse(s.OlderBefore) // a SkewSpec not read by parse
	}
	if !b.IsZero() && v.Less(b) {
		older = s.OlderThen
	}
	return kubeversion.Version{Major: v.Major, Minor: v.Minor + older}
}

// RuntimeSpec is a container runtime line (its status.nodeInfo.containerRuntimeVersion prefix,
// "containerd://1.") that kubelets stop supporting in RemovedIn.
type RuntimeSpec struct {
	Prefix      string `yaml:"prefix"`
	Rule        string `yaml:"rule"`
	RemovedIn   string `yaml:"removed_in"`
	Replacement string `yaml:"replacement"`
	Source      string `yaml:"source"`
}

// Source is one catalogue document: its name for messages and its bytes.
type Source struct {
	Name string
	Data []byte
}

// Load reads the embedded catalogue, then each file in order, adding or replacing entries.
func Load(files ...string) (*Catalogue, error) {
	srcs := embeddedSources()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--rules-file: %w", err)
		}
		srcs = append(srcs, Source{Name: f, Data: b})
	}
	return LoadSources(srcs...)
}

// LoadSources is Load with explicit documents; the first is the base.
func LoadSources(srcs ...Source) (*Catalogue, error) {
	var out *Catalogue
	for _, src := range srcs {
		c, err := parse(src)
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = c
		} else {
			out.merge(c)
		}
	}
	if out == nil {
		return nil, errors.New("no catalogue")
	}
	if err := out.complete(); err != nil {
		return nil, err
	}
	return out, nil
}

// Rule returns the rule with id, or nil.
func (c *Catalogue) Rule(id string) *RuleSpec {
	for i := range c.Rules {
		if c.Rules[i].ID == id {
			return &c.Rules[i]
		}
	}
	return nil
}

type gvr struct{ group, version, resource string }

func groupVersion(group, version string) string {
	if group == "" {
		return version
	}
	return group + "/" + version
}
