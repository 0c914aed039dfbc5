package rules

import (
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/auditlens/auditlens/lib/auditevent"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
)

// TemplateData is what a rule's message template sees.
type TemplateData struct {
	Verb, Resource, Subresource, GroupVersion, APIGroup, APIVersion string
	Namespace, Name, Username, UserAgent                            string
	DeprecatedIn, RemovedIn, Replacement                            string
	Detail, Value, Plugin                                           string
	// Source names the manifest file and document (classify manifests); "" for audit events.
	Source string
	// Component names the software whose CRD served the API ("" for Kubernetes).
	Component string
	// ReplacementUnknown: see Match.ReplacementUnknown.
	ReplacementUnknown bool
	// ControlPlane: the caller is the control plane itself (the apiserver's loopback client,
	// the controller manager or the scheduler): it moves with the control plane's upgrade,
	// not by changing a tool.
	ControlPlane bool
	// Since and Until are the kube-apiserver releases a component's version-skew policy
	// supports (version-skew, kubectl-version-skew).
	Since, Until string
}

// controlPlaneCaller reports whether user (with agent ua) is the control plane's own client:
// system:apiserver, system:kube-controller-manager, system:kube-scheduler, or a kube-system
// service account of the controller manager's controllers.
func controlPlaneCaller(user, ua string) bool {
	switch user {
	case "system:apiserver", "system:kube-controller-manager", "system:kube-scheduler":
		return true
	}
	return strings.HasPrefix(user, "system:serviceaccount:kube-system:") && strings.HasPrefix(ua, "kube-controller-manager/")
}

// Finding turns a match on ev into a Finding (contract fields, evidence, message). Every
// string is copied, so the finding outlives the decoded event.
func (e *Engine) Finding(ev *auditevent.Event, m *Match, cluster, node string) *auditlensv1.Finding {
	return e.FindingFrom(ev, m, cluster, node, "")
}

// FindingFrom is Finding for input that is not an audit log: source (a manifest file and
// document) is what the message names instead of a caller.
func (e *Engine) FindingFrom(ev *auditevent.Event, m *Match, cluster, node, source string) *auditlensv1.Finding {
	f := &auditlensv1.Finding{
		RuleId:       m.Rule.ID,
		Severity:     m.Severity,
		DeprecatedIn: m.DeprecatedIn,
		Replacement:  m.Replacement,
		Confidence:   m.Confidence,
	}
	// The strings of the event and the match are copied into one allocation (a finding is
	// one unit: they live and die together), not one each.
	var c copier
	c.add(&f.Cluster, cluster)
	c.add(&f.AuditId, m.AuditID(ev.AuditID))
	c.add(&f.Verb, ev.Verb)
	c.add(&f.RequestUri, ev.RequestURI)
	c.add(&f.ApiGroup, m.APIGroup)
	c.add(&f.ApiVersion, m.APIVersion)
	c.add(&f.Resource, m.Resource)
	c.add(&f.Username, ev.User.Username)
	c.add(&f.UserAgent, ev.UserAgent)
	c.add(&f.RemovedIn, m.RemovedIn)
	c.add(&f.Stage, ev.Stage)
	c.add(&f.Node, node)
	if t := ev.EventTime(); !t.IsZero() {
		f.EventTime = timestamppb.New(t)
	}
	f.RequestReceived = m.RequestReceived(ev)
	if r := ev.ObjectRef; r != nil {
		c.add(&f.Subresource, r.Subresource)
		c.add(&f.Namespace, r.Namespace)
		c.add(&f.Name, r.Name)
	}
	if len(ev.SourceIPs) > 0 {
		c.add(&f.SourceIp, ev.SourceIPs[0])
	}
	if st := ev.ResponseStatus; st != nil {
		f.ResponseCode = st.Code
	}
	evs := m.Evidence
	if m.ID != "" {
		// A sighting: the request it was first seen in.
		evs = append(slices.Clip(evs), Evidence{"userAgent", ev.UserAgent}, Evidence{"user.username", ev.User.Username},
			Evidence{"requestURI", ev.RequestURI}, Evidence{"auditID", ev.AuditID})
	}
	env, hasEnv := ev.Annotation(auditevent.EnvelopeAnnotation)
	if n := len(evs); n > 0 || hasEnv {
		if hasEnv {
			n++
		}
		evidence := make([]auditlensv1.Evidence, n)
		f.Evidence = make([]*auditlensv1.Evidence, n)
		for i, x := range evs {
			c.add(&evidence[i].Path, x.Path)
			c.add(&evidence[i].Value, x.Value)
			f.Evidence[i] = &evidence[i]
		}
		if hasEnv {
			// The cloud envelope the event came in (lib/envelope): where the finding came from.
			evidence[n-1].Path = EnvelopeEvidencePath
			c.add(&evidence[n-1].Value, env)
			f.Evidence[n-1] = &evidence[n-1]
		}
	}
	c.copy()
	f.Message = e.message(f, m, source)
	return f
}

// copier copies strings into one allocation: add each with where its copy goes, then copy.
type copier struct {
	dst []*string
	src []string
	n   int
	// fixed holds the first pairs without an allocation: a finding has about twenty.
	fixedDst [24]*string
	fixedSrc [24]string
}

func (c *copier) add(dst *string, src string) {
	if src == "" {
		return
	}
	if c.dst == nil {
		c.dst, c.src = c.fixedDst[:0], c.fixedSrc[:0]
	}
	c.dst, c.src = append(c.dst, dst), append(c.src, src)
	c.n += len(src)
}

// copy sets each destination to its copy of the string added.
func (c *copier) copy() {
	var b strings.Builder
	b.Grow(c.n)
	for _, s := range c.src {
		b.WriteString(s)
	}
	all, at := b.String(), 0
	for i, s := range c.src {
		*c.dst[i] = all[at : at+len(s)]
		at += len(s)
	}
}

// EnvelopeEvidencePath is the evidence path of the cloud envelope an event came in.
const EnvelopeEvidencePath = `annotations["` + auditevent.EnvelopeAnnotation + `"]`

// appliedManifestNote opens the message of a finding whose evidence is kubectl's record of
// the applied manifest rather than the object the apiserver kept.
const appliedManifestNote = "In the applied manifest (kubectl.kubernetes.io/last-applied-configuration; the apiserver may have dropped it from the stored object): "

func (e *Engine) message(f *auditlensv1.Finding, m *Match, source string) string {
	d := TemplateData{
		Verb: f.Verb, Resource: f.Resource, Subresource: f.Subresource,
		GroupVersion: groupVersion(f.ApiGroup, f.ApiVersion), APIGroup: f.ApiGroup, APIVersion: f.ApiVersion,
		Namespace: f.Namespace, Name: f.Name, Username: f.Username, UserAgent: f.UserAgent,
		DeprecatedIn: f.DeprecatedIn, RemovedIn: f.RemovedIn, Replacement: f.Replacement,
		Detail: m.Detail, Value: m.Value, Plugin: m.Plugin,
		Source: source, ReplacementUnknown: m.ReplacementUnknown, Component: m.Component,
		ControlPlane: source == "" && controlPlaneCaller(f.Username, f.UserAgent),
		Since:        m.Since, Until: m.Until,
	}
	if m.Rule.msg != nil {
		return render(m.Rule.msg, m.Origin, &d)
	}
	var b strings.Builder
	if m.Origin != "" {
		b.WriteString(m.Origin)
	}
	if err := m.Rule.tmpl.Execute(&b, d); err != nil {
		return m.Rule.ID + ": " + err.Error()
	}
	return collapseSpace(b.String())
}

// collapseSpace trims s and turns each run of white space in it into one space (the folded
// YAML and template lines of a message), in one pass and one allocation.
func collapseSpace(s string) string {
	out := make([]byte, 0, len(s))
	space := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ' ', '\t', '\n', '\r', '\v', '\f':
			space = len(out) > 0
		default:
			if space {
				out = append(out, ' ')
				space = false
			}
			out = append(out, c)
		}
	}
	return string(out)
}
