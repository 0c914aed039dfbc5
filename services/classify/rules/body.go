package rules

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"strings"

	"github.com/valyala/fastjson"

	"github.com/auditlens/auditlens/lib/auditevent"
)

// BodyResources are the resources whose rules read request bodies, with where the pod
// template sits (for workloads) or "" for the other kinds. deploy/audit-policy.yaml logs
// exactly these at Request level on write verbs.
var BodyResources = map[string]string{
	"pods":                       "",
	"podtemplates":               "template",
	"deployments":                "spec.template",
	"daemonsets":                 "spec.template",
	"statefulsets":               "spec.template",
	"replicasets":                "spec.template",
	"replicationcontrollers":     "spec.template",
	"jobs":                       "spec.template",
	"cronjobs":                   "spec.jobTemplate.spec.template",
	"certificatesigningrequests": "",
	"nodes":                      "",
	"services":                   "",
	"persistentvolumes":          "",
	"storageclasses":             "",
	"runtimeclasses":             "",
	"ingressclasses":             "",
	"ingresses":                  "",
	"networkpolicies":            "",
}

// NeedsBody reports whether ev is a write (create, update, patch) whose body some rule
// reads: the audit policy must log it at Request level for those rules to see anything.
func NeedsBody(ev *auditevent.Event) bool {
	switch ev.Verb {
	case "create", "update", "patch":
	default:
		return false
	}
	r := ev.ObjectRef
	if r == nil || r.Subresource != "" {
		return false
	}
	_, ok := BodyResources[r.Resource]
	return ok
}

func (m *matcher) body() {
	switch m.ev.ObjectRef.Resource {
	case "services", "certificatesigningrequests", "ingressclasses", "ingresses", "networkpolicies":
	default:
		if !m.mayMatch(m.ev.RequestObjectRaw) {
			return // skip parsing a body that contains no key any rule looks for
		}
	}
	obj := m.ev.RequestObject()
	if obj == nil || obj.Type() != fastjson.TypeObject {
		return // absent, unparseable, or a JSON patch (an array)
	}
	res := m.ev.ObjectRef.Resource
	m.object(res, obj)
	// kubectl's client-side apply records the manifest it applied; a field or annotation the
	// apiserver drops on write (topologyKeys, alpha seccomp) survives only there.
	if la := obj.GetStringBytes("metadata", "annotations", lastApplied); len(la) > 0 {
		applied, err := fastjson.ParseBytes(la)
		if err != nil || applied.Type() != fastjson.TypeObject {
			return
		}
		m.root, m.origin = m.root+`.metadata.annotations["`+lastApplied+`"]`, appliedManifestNote
		m.object(res, applied)
		m.root, m.origin = "requestObject", ""
	}
}

// lastApplied is the annotation in which kubectl apply records the applied manifest.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// object runs the body rules of resource res over obj (found at m.root).
func (m *matcher) object(res string, obj *fastjson.Value) {
	switch res {
	case "pods":
		m.podObject(obj, m.root)
	case "nodes":
		m.nodeObject(obj)
	case "services":
		m.service(obj)
	case "certificatesigningrequests":
		m.csr(obj)
	case "persistentvolumes":
		if terms := obj.Get("spec", "nodeAffinity", "required", "nodeSelectorTerms"); terms != nil {
			m.selectorTerms(terms, m.root+".spec.nodeAffinity.required.nodeSelectorTerms", "PV node affinity")
		}
	case "storageclasses":
		for i, t := range obj.GetArray("allowedTopologies") {
			for j, e := range t.GetArray("matchLabelExpressions") {
				m.labelKey(string(e.GetStringBytes("key")), "StorageClass allowedTopologies", func() string {
					return m.root + ".allowedTopologies[" + itoa(i) + "].matchLabelExpressions[" + itoa(j) + "].key"
				})
			}
		}
	case "ingresses":
		m.ingress(obj)
	case "networkpolicies":
		m.networkPolicy(obj)
	case "ingressclasses":
		if c := string(obj.GetStringBytes("spec", "controller")); c == ingressNginxController {
			m.add(IngressNginx, Match{Detail: "IngressClass spec.controller", Value: c,
				Evidence: []Evidence{{m.root + ".spec.controller", c}}})
		}
	case "runtimeclasses":
		if sel := obj.GetObject("scheduling", "nodeSelector"); sel != nil {
			sel.Visit(func(k []byte, _ *fastjson.Value) {
				key := string(k)
				m.labelKey(key, "RuntimeClass nodeSelector", func() string {
					return m.root + `.scheduling.nodeSelector["` + key + `"]`
				})
			})
		}
		m.tolerations(obj.Get("scheduling", "tolerations"), m.root+".scheduling.tolerations")
	default:
		path := BodyResources[res]
		if path == "" {
			return
		}
		keys := strings.Split(path, ".")
		if tmpl := obj.Get(keys...); tmpl != nil && tmpl.Type() == fastjson.TypeObject {
			m.podObject(tmpl, m.root+"."+path)
		}
	}
}

// mayMatch reports whether raw contains a needle (or escapes that could hide one).
func (m *matcher) mayMatch(raw []byte) bool {
	if bytes.Contains(raw, []byte(`\/`)) || bytes.Contains(raw, []byte(`\u`)) {
		return true
	}
	for _, n := range m.e.needles {
		if bytes.Contains(raw, n) {
			return true
		}
	}
	return false
}

// podObject checks a pod or a pod template: annotations and the scheduling fields of its spec.
func (m *matcher) podObject(obj *fastjson.Value, path string) {
	if ann := obj.GetObject("metadata", "annotations"); ann != nil {
		ann.Visit(func(k []byte, v *fastjson.Value) {
			for i := range m.e.objAnnotations {
				s := &m.e.objAnnotations[i]
				key := string(k)
				if !s.matches(key) {
					continue
				}
				val := string(v.GetStringBytes())
				m.add(s.Rule, Match{
					Severity: severities[s.Severity], DeprecatedIn: s.DeprecatedIn, RemovedIn: s.RemovedIn, Replacement: s.Replacement,
					Detail: key, Value: val,
					Evidence: []Evidence{{path + `.metadata.annotations["` + key + `"]`, val}},
				})
			}
		})
	}
	spec := obj.Get("spec")
	if spec == nil || spec.Type() != fastjson.TypeObject {
		return
	}
	path += ".spec"
	m.podIPs(spec, path)
	m.windowsHostNetwork(spec, path)
	for i, v := range spec.GetArray("volumes") {
		if g := v.Get("gitRepo"); g != nil && g.Type() == fastjson.TypeObject {
			repo := string(g.GetStringBytes("repository"))
			m.add(GitRepoVolume, Match{Detail: "volume " + string(v.GetStringBytes("name")), Value: repo,
				Evidence: []Evidence{{path + ".volumes[" + itoa(i) + "].gitRepo.repository", repo}}})
		}
	}
	if sel := spec.GetObject("nodeSelector"); sel != nil {
		sel.Visit(func(k []byte, _ *fastjson.Value) {
			key := string(k)
			m.labelKey(key, "nodeSelector", func() string { return path + `.nodeSelector["` + key + `"]` })
		})
	}
	if na := spec.Get("affinity", "nodeAffinity"); na != nil {
		if terms := na.Get("requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"); terms != nil {
			m.selectorTerms(terms, path+".affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms", "node affinity")
		}
		for i, p := range na.GetArray("preferredDuringSchedulingIgnoredDuringExecution") {
			if pref := p.Get("preference"); pref != nil {
				m.selectorTerm(pref, path+".affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution["+itoa(i)+"].preference", "node affinity")
			}
		}
	}
	for _, kind := range [...]string{"podAffinity", "podAntiAffinity"} {
		pa := spec.Get("affinity", kind)
		if pa == nil {
			continue
		}
		for i, t := range pa.GetArray("requiredDuringSchedulingIgnoredDuringExecution") {
			m.labelKey(string(t.GetStringBytes("topologyKey")), kind+" topologyKey", func() string {
				return path + ".affinity." + kind + ".requiredDuringSchedulingIgnoredDuringExecution[" + itoa(i) + "].topologyKey"
			})
		}
		for i, t := range pa.GetArray("preferredDuringSchedulingIgnoredDuringExecution") {
			m.labelKey(string(t.GetStringBytes("podAffinityTerm", "topologyKey")), kind+" topologyKey", func() string {
				return path + ".affinity." + kind + ".preferredDuringSchedulingIgnoredDuringExecution[" + itoa(i) + "].podAffinityTerm.topologyKey"
			})
		}
	}
	for i, c := range spec.GetArray("topologySpreadConstraints") {
		m.labelKey(string(c.GetStringBytes("topologyKey")), "topologySpreadConstraints", func() string {
			return path + ".topologySpreadConstraints[" + itoa(i) + "].topologyKey"
		})
	}
	m.tolerations(spec.Get("tolerations"), path+".tolerations")
}

func (m *matcher) tolerations(v *fastjson.Value, path string) {
	if v == nil {
		return
	}
	arr, _ := v.Array()
	for i, t := range arr {
		m.labelKey(string(t.GetStringBytes("key")), "a toleration", func() string { return path + "[" + itoa(i) + "].key" })
	}
}

func (m *matcher) selectorTerms(terms *fastjson.Value, path, where string) {
	arr, _ := terms.Array()
	for i, t := range arr {
		m.selectorTerm(t, path+"["+itoa(i)+"]", where)
	}
}

func (m *matcher) selectorTerm(t *fastjson.Value, path, where string) {
	for _, field := range [...]string{"matchExpressions", "matchFields"} {
		for j, e := range t.GetArray(field) {
			m.labelKey(string(e.GetStringBytes("key")), where, func() string {
				return path + "." + field + "[" + itoa(j) + "].key"
			})
		}
	}
}

// labelKey records a deprecated label key found at where (path built only on a match).
func (m *matcher) labelKey(key, where string, path func() string) {
	l := m.e.labels[key]
	if l == nil {
		return
	}
	m.add(l.Rule, Match{
		Severity: severities[l.Severity], DeprecatedIn: l.DeprecatedIn, RemovedIn: l.RemovedIn, Replacement: l.Replacement,
		Detail: where, Value: key,
		Evidence: []Evidence{{path(), key}},
	})
}

func (m *matcher) nodeObject(obj *fastjson.Value) {
	m.runtime(obj)
	if labels := obj.GetObject("metadata", "labels"); labels != nil {
		labels.Visit(func(k []byte, v *fastjson.Value) {
			key := string(k)
			m.labelKey(key, "node label", func() string { return m.root + `.metadata.labels["` + key + `"]` })
		})
	}
	for i, t := range obj.GetArray("spec", "taints") {
		m.labelKey(string(t.GetStringBytes("key")), "node taint", func() string {
			return m.root + ".spec.taints[" + itoa(i) + "].key"
		})
	}
}

// runtime flags a node whose kubelet reports a container runtime line that a coming release
// stops supporting (containerd 1.x after 1.35): a node create, or a nodes/status write where
// the audit policy logs those.
func (m *matcher) runtime(obj *fastjson.Value) {
	rv := string(obj.GetStringBytes("status", "nodeInfo", "containerRuntimeVersion"))
	if rv == "" {
		return
	}
	for i := range m.e.cat.Runtimes {
		r := &m.e.cat.Runtimes[i]
		if strings.HasPrefix(rv, r.Prefix) {
			m.add(r.Rule, Match{RemovedIn: r.RemovedIn, Replacement: r.Replacement, Detail: "container runtime", Value: rv,
				Evidence: []Evidence{{m.root + ".status.nodeInfo.containerRuntimeVersion", rv}}})
			return
		}
	}
}

// nodeStatus reads a write of nodes/status (logged at Request level only where the audit
// policy asks for it: deploy/audit-policy.yaml does not, they are frequent) for the runtime.
func (m *matcher) nodeStatus() {
	r := m.ev.ObjectRef
	if r == nil || r.Resource != "nodes" || r.Subresource != "status" || !bytes.Contains(m.ev.RequestObjectRaw, []byte("containerRuntimeVersion")) {
		return
	}
	if obj := m.ev.RequestObject(); obj != nil && obj.Type() == fastjson.TypeObject {
		m.runtime(obj)
	}
}

// ingressNginxController is the IngressClass controller of the retired ingress-nginx.
const ingressNginxController = "k8s.io/ingress-nginx"

func (m *matcher) service(obj *fastjson.Value) {
	m.serviceIPs(obj)
	if ips := obj.GetArray("spec", "externalIPs"); len(ips) > 0 {
		v := joinStrings(ips)
		m.add(ServiceExternalIPs, Match{Detail: "spec.externalIPs", Value: v,
			Evidence: []Evidence{{m.root + ".spec.externalIPs", v}}})
	}
	if td := string(obj.GetStringBytes("spec", "trafficDistribution")); td == "PreferClose" {
		m.add(ServicePreferClose, Match{Detail: "spec.trafficDistribution", Value: td,
			Evidence: []Evidence{{m.root + ".spec.trafficDistribution", td}}})
	}
	keys := obj.GetArray("spec", "topologyKeys")
	if len(keys) == 0 {
		return
	}
	v := joinStrings(keys)
	m.add(ServiceTopologyKeys, Match{Detail: "spec.topologyKeys", Value: v,
		Evidence: []Evidence{{m.root + ".spec.topologyKeys", v}}})
}

// joinStrings writes a JSON array of strings as "[a, b]".
func joinStrings(vs []*fastjson.Value) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v.GetStringBytes())
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// csr flags a CertificateSigningRequest asking for "key encipherment" with a key that cannot
// encipher (ECDSA, Ed25519). RSA keys are never flagged; unparseable requests neither.
func (m *matcher) csr(obj *fastjson.Value) {
	usages := obj.GetArray("spec", "usages")
	want := false
	for _, u := range usages {
		if string(u.GetStringBytes()) == "key encipherment" {
			want = true
		}
	}
	if !want {
		return
	}
	alg := csrKeyAlgorithm(obj.GetStringBytes("spec", "request"))
	if alg == "" {
		return
	}
	signer := string(obj.GetStringBytes("spec", "signerName"))
	m.add(CSRKeyEnciphermentNonRSA, Match{Detail: alg, Value: signer, Evidence: []Evidence{
		{m.root + ".spec.usages", `"key encipherment"`},
		{m.root + ".spec.request", alg + " public key"},
		{m.root + ".spec.signerName", signer},
	}})
}

// csrKeyAlgorithm returns "ECDSA" or "Ed25519" for a CSR (base64 of PEM or DER) with such a
// key, "" otherwise.
func csrKeyAlgorithm(b64 []byte) string {
	raw := make([]byte, base64.StdEncoding.DecodedLen(len(b64)))
	n, err := base64.StdEncoding.Decode(raw, b64)
	if err != nil {
		return ""
	}
	raw = raw[:n]
	der := raw
	if blk, _ := pem.Decode(raw); blk != nil {
		der = blk.Bytes
	}
	req, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return ""
	}
	switch req.PublicKeyAlgorithm {
	case x509.ECDSA:
		return "ECDSA"
	case x509.Ed25519:
		return "Ed25519"
	}
	return ""
}

func itoa(i int) string {
	if i >= 0 && i < 10 {
		return string(rune('0' + i))
	}
	var b [20]byte
	n := len(b)
	for i > 0 {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
	}
	return string(b[n:])
}
