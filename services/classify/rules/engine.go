package rules

import (
	"bytes"
	"slices"
	"strings"

	"github.com/valyala/fastjson"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/kubeapi"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
)

var severities = map[string]auditlensv1.Severity{
	"":         auditlensv1.Severity_SEVERITY_UNSPECIFIED, // entries: the rule's severity
	"info":     auditlensv1.Severity_SEVERITY_INFO,
	"warning":  auditlensv1.Severity_SEVERITY_WARNING,
	"critical": auditlensv1.Severity_SEVERITY_CRITICAL,
}

var confidences = map[string]auditlensv1.Confidence{
	"":       auditlensv1.Confidence_CONFIDENCE_HIGH,
	"low":    auditlensv1.Confidence_CONFIDENCE_LOW,
	"medium": auditlensv1.Confidence_CONFIDENCE_MEDIUM,
	"high":   auditlensv1.Confidence_CONFIDENCE_HIGH,
}

// Evidence is one matched fact: a JSON path into the audit event and the value found there.
type Evidence struct{ Path, Value string }

// Match is one rule firing on one event. Its strings may point into the decoded event: turn
// it into a Finding (which copies them) before the next event is decoded.
type Match struct {
	Rule         *RuleSpec
	Severity     auditlensv1.Severity
	Confidence   auditlensv1.Confidence
	DeprecatedIn string
	RemovedIn    string
	Replacement  string
	// APIGroup, APIVersion and Resource name the API called (from objectRef, or parsed
	// from the request URI when objectRef is missing).
	APIGroup, APIVersion, Resource string
	// Detail says what matched (an annotation, a label's place); Value is its value.
	Detail, Value string
	// Plugin is the credential plugin to install (legacy-auth-provider-client).
	Plugin string
	// Component names the software whose CRD served the API (cert-manager, istio, ...);
	// DeprecatedIn and RemovedIn are then "<component> <release>".
	Component string
	// ReplacementUnknown: the API is known only from the apiserver's annotation and the
	// catalogue has no successor for it (never "has no replacement").
	ReplacementUnknown bool
	// Origin says where in the event the evidence was found when that is not the object the
	// request sent (kubectl's last-applied-configuration: the applied manifest).
	Origin   string
	Evidence []Evidence
	// ID keys a sighting (fleet.go): the finding's audit_id is this instead of the request's,
	// so one caller seen all day is one finding. Empty for a finding about one request.
	ID string
	// Since and Until are the kube-apiserver releases a component's version-skew policy
	// supports (Since only for a client, which may be newer than the apiserver).
	Since, Until string
}

// AuditID is the audit_id of the finding m makes of ev: m.ID for a sighting, else ev's.
func (m *Match) AuditID(auditID string) string {
	if m.ID != "" {
		return m.ID
	}
	return auditID
}

// RequestReceived is the request_received of the finding m makes of ev, the rest of its
// identity beside the audit ID: ev's requestReceivedTimestamp in Unix seconds, which every
// stage of one request carries and which tells two requests sharing a client-chosen Audit-ID
// apart; 0 for a sighting (its ID names caller and day) and for an event without one (its
// stages' other times differ).
func (m *Match) RequestReceived(ev *auditevent.Event) int64 {
	if m.ID != "" || ev.RequestReceivedTimestamp.IsZero() {
		return 0
	}
	return ev.RequestReceivedTimestamp.Unix()
}

// Engine matches audit events against a catalogue. It is safe for concurrent use.
type Engine struct {
	cat            *Catalogue
	rules          map[string]*RuleSpec
	apis           map[gvr]*APISpec
	annotations    []AnnotationSpec
	objAnnotations []AnnotationSpec
	labels         map[string]*LabelSpec
	bodyKinds      map[gvr]*BodyKindSpec
	// served lists the served versions of each group and resource.
	served map[[2]string][]*ServedSpec
	// needles: a pod, template or node body can only match when its raw JSON contains one.
	needles [][]byte
	// skew holds the texts of each version_skew row's releases 1.0 to 1.99 (fleet.go).
	skew [][]skewText
	// successors maps a successor to the APIs it replaces, hasSuccessor each of the latter to
	// itself (migration.go).
	successors   map[API][]API
	hasSuccessor map[API]API
	// moveResources holds the resources of both.
	moveResources map[string]bool
	// rollback holds the served API versions recent releases introduced (rollback.go).
	rollback map[gvr]rollbackSpec
}

// NewEngine prepares c for matching.
func NewEngine(c *Catalogue) *Engine {
	e := &Engine{
		cat:       c,
		rules:     map[string]*RuleSpec{},
		apis:      map[gvr]*APISpec{},
		labels:    map[string]*LabelSpec{},
		bodyKinds: map[gvr]*BodyKindSpec{},
		served:    map[[2]string][]*ServedSpec{},
		rollback:  rollbackAPIs(c),
	}
	for i := range c.BodyKinds {
		b := &c.BodyKinds[i]
		e.bodyKinds[gvr{b.Group, b.Version, b.Kind}] = b
	}
	for i := range c.Served {
		sv := &c.Served[i]
		k := [2]string{sv.Group, sv.Resource}
		e.served[k] = append(e.served[k], sv)
	}
	for i := range c.Rules {
		if !c.Rules[i].Disabled {
			e.rules[c.Rules[i].ID] = &c.Rules[i]
		}
	}
	for i := range c.APIs {
		a := &c.APIs[i]
		e.apis[gvr{a.Group, a.Version, a.Resource}] = a
	}
	for _, a := range c.Annotations {
		if e.rules[a.Rule] != nil {
			e.annotations = append(e.annotations, a)
		}
	}
	for _, a := range c.ObjectAnnotations {
		if e.rules[a.Rule] != nil {
			e.objAnnotations = append(e.objAnnotations, a)
		}
	}
	for i := range c.Labels {
		if e.rules[c.Labels[i].Rule] != nil {
			e.labels[c.Labels[i].Key] = &c.Labels[i]
		}
	}
	e.needles = bodyNeedles(e)
	e.skew = skewTexts(c)
	e.successors, e.hasSuccessor, e.moveResources = successors(e), map[API]API{}, map[string]bool{}
	for to, olds := range e.successors {
		e.moveResources[to.Resource] = true
		for _, o := range olds {
			e.hasSuccessor[o], e.moveResources[o.Resource] = o, true
		}
	}
	return e
}

// bodyNeedles lists strings one of which the raw body of a pod, pod template, node, PV,
// StorageClass or RuntimeClass must contain for any annotation or label rule to match:
// "kubernetes.io/" covers every built-in key, catalogue additions bring their own.
func bodyNeedles(e *Engine) [][]byte {
	const common = "kubernetes.io/"
	// gitRepo volumes, a node's container runtime, a Windows pod's host network and the IPs a
	// pod spec sets carry no such key.
	set := map[string]bool{common: true, `"gitRepo"`: true, "containerRuntimeVersion": true, `"hostNetwork"`: true,
		`"nameservers"`: true, `"hostAliases"`: true}
	for _, a := range e.objAnnotations {
		set[a.Key+a.Prefix] = true
	}
	for k := range e.labels {
		set[k] = true
	}
	out := [][]byte{[]byte(common)}
	for n := range set {
		if n != common && !strings.Contains(n, common) && n != "" {
			out = append(out, []byte(n))
		}
	}
	return out
}

// Catalogue returns the catalogue the engine was built from.
func (e *Engine) Catalogue() *Catalogue { return e.cat }

// matcher collects the matches of one event, one per rule.
type matcher struct {
	e   *Engine
	ev  *auditevent.Event
	out []Match
	// api is the API called, resolved once.
	group, version, resource string
	// root is the JSON path of the object the body rules walk; origin is set while they
	// walk something other than the object the request sent (see Match.Origin).
	root, origin string
}

// add records m unless its rule is off or ignores the caller; a second match of the same
// rule only adds its evidence to the first.
func (m *matcher) add(ruleID string, mt Match) {
	r := m.e.rules[ruleID]
	if r == nil || r.ignores(m.ev.User.Username) {
		return
	}
	for i := range m.out {
		if m.out[i].Rule == r {
			m.out[i].Evidence = append(m.out[i].Evidence, mt.Evidence...)
			return
		}
	}
	mt.Rule = r
	if mt.Severity == auditlensv1.Severity_SEVERITY_UNSPECIFIED {
		mt.Severity = severities[r.Severity]
	}
	if mt.Confidence == auditlensv1.Confidence_CONFIDENCE_UNSPECIFIED {
		mt.Confidence = confidences[r.Confidence]
	}
	if mt.DeprecatedIn == "" {
		mt.DeprecatedIn = r.DeprecatedIn
	}
	if mt.RemovedIn == "" {
		mt.RemovedIn = r.RemovedIn
	}
	if mt.Replacement == "" {
		mt.Replacement = r.Replacement
	}
	if mt.APIGroup == "" && mt.APIVersion == "" && mt.Resource == "" {
		mt.APIGroup, mt.APIVersion, mt.Resource = m.group, m.version, m.resource
	}
	if mt.Origin == "" {
		mt.Origin = m.origin
	}
	m.out = append(m.out, mt)
}

func (r *RuleSpec) ignores(user string) bool { return userIn(r.IgnoreUsers, user) }

// userIn reports whether user is in list, where a trailing '*' matches a prefix.
func userIn(list []string, user string) bool {
	for _, u := range list {
		if u == user || (strings.HasSuffix(u, "*") && strings.HasPrefix(user, u[:len(u)-1])) {
			return true
		}
	}
	return false
}

// Classify appends to dst the matches of ev, at most one per rule, and returns it.
func (e *Engine) Classify(ev *auditevent.Event, dst []Match) []Match {
	m := matcher{e: e, ev: ev, out: dst, root: "requestObject"}
	first := len(dst) // the matches of ev are m.out[first:]
	m.group, m.version, m.resource = apiOf(ev)
	m.api()
	m.rollback()
	if r := ev.ObjectRef; r != nil && r.Subresource != "" && ev.RequestObjectRaw != nil && len(e.bodyKinds) > 0 {
		m.subresourceBody()
	}
	m.auditAnnotations()
	if m.resource == "podsecuritypolicies" {
		m.add(PSP, Match{Detail: "request on podsecuritypolicies", Value: ev.Verb, Evidence: []Evidence{
			{"objectRef.resource", m.resource}, {"verb", ev.Verb},
		}})
	}
	if NeedsBody(ev) && ev.RequestObjectRaw != nil {
		m.body()
	}
	m.authProviderClient()
	m.agent()
	m.nodesProxy()
	m.eviction()
	m.nodeStatus()
	m.componentEvent()
	m.out = append(m.out[:first], onePSP(m.out[first:])...)
	return m.out
}

// onePSP makes a request on podsecuritypolicies one finding: the psp rule, which says what to
// do instead (Pod Security Admission), with the API version called and its removal release
// taken from the removed-api match it replaces. Both counted PSP use twice in every blocker
// list (scan, console, gate, mail).
func onePSP(matches []Match) []Match {
	psp := slices.IndexFunc(matches, func(m Match) bool { return m.Rule != nil && m.Rule.ID == PSP })
	api := slices.IndexFunc(matches, func(m Match) bool {
		return m.Rule != nil && m.Rule.ID == RemovedAPI && m.Resource == "podsecuritypolicies"
	})
	if psp < 0 || api < 0 {
		return matches
	}
	p, a := &matches[psp], matches[api]
	p.APIGroup, p.APIVersion, p.Resource = a.APIGroup, a.APIVersion, a.Resource
	p.DeprecatedIn, p.RemovedIn = a.DeprecatedIn, a.RemovedIn
	if a.Replacement != "" {
		p.Replacement = a.Replacement
	}
	ev := slices.Clip(a.Evidence)
	for _, e := range p.Evidence {
		if !slices.ContainsFunc(ev, func(x Evidence) bool { return x.Path == e.Path }) {
			ev = append(ev, e)
		}
	}
	p.Evidence = ev
	return slices.Delete(matches, api, api+1)
}

// apiOf returns the group, version and resource a request addressed: objectRef, else the
// request URI (/api/v1/..., /apis/group/version/...).
func apiOf(ev *auditevent.Event) (group, version, resource string) {
	if r := ev.ObjectRef; r != nil && r.Resource != "" {
		if r.APIVersion == "" {
			if g, v, res := parseURI(ev.RequestURI); res == r.Resource {
				return g, v, res
			}
		}
		return r.APIGroup, r.APIVersion, r.Resource
	}
	return parseURI(ev.RequestURI)
}

// parseURI resolves a resource request path the way the apiserver's request-info resolver
// does, well enough to name the group, version and resource.
func parseURI(uri string) (group, version, resource string) {
	if i := strings.IndexByte(uri, '?'); i >= 0 {
		uri = uri[:i]
	}
	parts := strings.Split(strings.Trim(uri, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		version, parts = parts[1], parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		group, version, parts = parts[1], parts[2], parts[3:]
	default:
		return "", "", ""
	}
	if parts[0] == "watch" && len(parts) > 1 {
		parts = parts[1:]
	}
	if parts[0] == "namespaces" && len(parts) >= 3 {
		parts = parts[2:]
	}
	return group, version, parts[0]
}

func (m *matcher) api() {
	if m.resource == "" {
		return
	}
	ev := m.ev
	removed, hasRemoved := ev.Annotation("k8s.io/removed-release")
	deprecated, _ := ev.Annotation("k8s.io/deprecated")
	ann := func(ev []Evidence) []Evidence {
		if hasRemoved {
			ev = append(ev, Evidence{`annotations["k8s.io/removed-release"]`, removed})
		}
		if deprecated != "" {
			ev = append(ev, Evidence{`annotations["k8s.io/deprecated"]`, deprecated})
		}
		return ev
	}
	if a := m.e.apis[gvr{m.group, m.version, m.resource}]; a != nil {
		mt := Match{
			DeprecatedIn: a.DeprecatedIn, RemovedIn: a.RemovedIn, Replacement: a.Replacement,
			Value: a.Note, Component: a.Component,
			Evidence: ann([]Evidence{
				{"objectRef.apiGroup", m.group}, {"objectRef.apiVersion", m.version}, {"objectRef.resource", m.resource},
			}),
		}
		if a.Component != "" { // releases of the component: "cert-manager 1.6"
			mt.DeprecatedIn, mt.RemovedIn = componentRelease(a.Component, a.DeprecatedIn), componentRelease(a.Component, a.RemovedIn)
		}
		if a.RemovedIn != "" {
			m.addAPI(RemovedAPI, mt)
		} else {
			m.addAPI(DeprecatedAPI, mt)
		}
		return
	}
	if !(hasRemoved && isRelease(removed)) && deprecated != "true" {
		return
	}
	// Known from the apiserver's annotation alone: the successor is the most stable version
	// of the same group and resource served today, if the catalogue knows one.
	repl := m.e.servedSuccessor(m.group, m.version, m.resource)
	mt := Match{Replacement: repl, ReplacementUnknown: repl == "", Evidence: ann([]Evidence{
		{"objectRef.apiGroup", m.group}, {"objectRef.apiVersion", m.version}, {"objectRef.resource", m.resource},
	})}
	if hasRemoved && isRelease(removed) {
		mt.RemovedIn = removed
		m.addAPI(RemovedAPI, mt)
	} else {
		m.addAPI(DeprecatedAPI, mt)
	}
}

// addAPI adds an API finding, or, for a read by a tool that reads every served version
// (catalogue enumerators), an enumerator-read finding that blocks nothing: the tool stops
// reading the version when it is gone. Its writes are API findings like anyone's.
func (m *matcher) addAPI(rule string, mt Match) {
	if en := m.enumerator(); en != nil && m.e.rules[EnumeratorRead] != nil {
		enumerated(&mt, en.Name)
		m.add(EnumeratorRead, mt)
		return
	}
	m.add(rule, mt)
}

// enumerator is the known enumerator that made this read, or nil (a write, another caller,
// or a read answered 404: an enumerator reads what discovery says is served, so a 404 is a
// caller still asking for a version the cluster no longer serves, which fails today).
func (m *matcher) enumerator() *EnumeratorSpec {
	switch m.ev.Verb {
	case "get", "list", "watch":
	default:
		return nil
	}
	if st := m.ev.ResponseStatus; st != nil && st.Code == 404 {
		return nil
	}
	for i := range m.e.cat.Enumerators {
		if en := &m.e.cat.Enumerators[i]; en.matches(m.ev.User.Username, m.ev.UserAgent) {
			return en
		}
	}
	return nil
}

// servedSuccessor is the most stable served version of group and resource other than
// version ("group/version"), or "".
func (e *Engine) servedSuccessor(group, version, resource string) string {
	best := ""
	for _, sv := range e.served[[2]string{group, resource}] {
		if sv.Version != version && (best == "" || kubeapi.MoreStable(sv.Version, best)) {
			best = sv.Version
		}
	}
	if best == "" {
		return ""
	}
	return groupVersion(group, best)
}

// subresourceBody flags a subresource request whose logged body names a removed or
// deprecated version of its kind (an Eviction posted to pods/eviction as policy/v1beta1).
func (m *matcher) subresourceBody() {
	raw := m.ev.RequestObjectRaw
	if !bytes.Contains(raw, []byte(`"apiVersion"`)) {
		return
	}
	obj := m.ev.RequestObject()
	if obj == nil || obj.Type() != fastjson.TypeObject {
		return
	}
	apiVersion := string(obj.GetStringBytes("apiVersion"))
	kind := string(obj.GetStringBytes("kind"))
	group, version, ok := strings.Cut(apiVersion, "/")
	if !ok {
		group, version = "", apiVersion
	}
	b := m.e.bodyKinds[gvr{group, version, kind}]
	if b == nil {
		return
	}
	mt := Match{
		DeprecatedIn: b.DeprecatedIn, RemovedIn: b.RemovedIn, Replacement: b.Replacement,
		APIGroup: group, APIVersion: version, Resource: m.resource,
		Detail: "a " + apiVersion + " " + kind + " body sent to " + m.resource + "/" + m.ev.ObjectRef.Subresource,
		Evidence: []Evidence{{"requestObject.apiVersion", apiVersion}, {"requestObject.kind", kind},
			{"objectRef.subresource", m.ev.ObjectRef.Subresource}},
	}
	if b.RemovedIn != "" {
		m.add(RemovedAPI, mt)
	} else {
		m.add(DeprecatedAPI, mt)
	}
}

func (m *matcher) auditAnnotations() {
	ev := m.ev
	for _, a := range ev.Annotations {
		switch a.Key {
		case "authorization.k8s.io/decision", "k8s.io/deprecated", "k8s.io/removed-release":
			continue
		case "authorization.k8s.io/reason":
			if containsFold(a.Value, "podsecuritypolic") {
				m.add(PSP, Match{Detail: "authorization decision on a PodSecurityPolicy", Value: a.Value,
					Evidence: []Evidence{{`annotations["authorization.k8s.io/reason"]`, a.Value}}})
			}
			continue
		case "pod-security.kubernetes.io/enforce-policy":
			if st := ev.ResponseStatus; st != nil && st.Code == 403 && strings.Contains(st.Message, "violates PodSecurity") {
				m.add(PodSecurityViolation, Match{Detail: "was denied by Pod Security enforce " + a.Value, Value: st.Message,
					Evidence: []Evidence{{`annotations["pod-security.kubernetes.io/enforce-policy"]`, a.Value}, {"responseStatus.message", st.Message}}})
			}
			continue
		}
		for i := range m.e.annotations {
			s := &m.e.annotations[i]
			if !s.matches(a.Key) {
				continue
			}
			detail := a.Key
			if s.Rule == PodSecurityViolation {
				detail = "would violate the namespace's Pod Security audit level"
			}
			m.add(s.Rule, Match{
				Severity: severities[s.Severity], DeprecatedIn: s.DeprecatedIn, RemovedIn: s.RemovedIn, Replacement: s.Replacement,
				Detail: detail, Value: a.Value,
				Evidence: []Evidence{{`annotations["` + a.Key + `"]`, a.Value}},
			})
		}
	}
}

// containsFold reports whether s contains the lower-case ASCII substr, ignoring case.
func containsFold(s, substr string) bool {
	n := len(substr)
	if n == 0 {
		return true
	}
	c0 := substr[0]
	for i := 0; i+n <= len(s); i++ {
		if s[i]|0x20 == c0 && strings.EqualFold(s[i:i+n], substr) {
			return true
		}
	}
	return false
}

// ResourceOf is the REST resource of a kind at group/version, for input that names kinds
// (manifests): from the catalogue's rows and served resources, else the lower-case plural
// the apiserver would use for a custom resource (kubeapi.Resource).
func (e *Engine) ResourceOf(group, version, kind string) string {
	for i := range e.cat.APIs {
		if a := &e.cat.APIs[i]; a.Group == group && a.Kind == kind && a.Version == version {
			return a.Resource
		}
	}
	res := ""
	for i := range e.cat.Served {
		if sv := &e.cat.Served[i]; sv.Group == group && sv.Kind == kind {
			if sv.Version == version {
				return sv.Resource
			}
			res = sv.Resource
		}
	}
	if res == "" {
		for i := range e.cat.APIs {
			if a := &e.cat.APIs[i]; a.Group == group && a.Kind == kind {
				res = a.Resource
			}
		}
	}
	if res != "" {
		return res
	}
	return kubeapi.Resource(kind)
}

// componentRelease is a release of a component as findings carry it: "cert-manager 1.6"
// ("" stays "").
func componentRelease(component, release string) string {
	if release == "" {
		return ""
	}
	return component + " " + release
}
