package rules

import (
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
	// ReplacementUnknown: see Match.ReplacementUnknown.
	ReplacementUnknown bool
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
		Cluster:      strings.Clone(cluster),
		AuditId:      strings.Clone(ev.AuditID),
		Verb:         strings.Clone(ev.Verb),
		RequestUri:   strings.Clone(ev.RequestURI),
		ApiGroup:     strings.Clone(m.APIGroup),
		ApiVersion:   strings.Clone(m.APIVersion),
		Resource:     strings.Clone(m.Resource),
		Username:     strings.Clone(ev.User.Username),
		UserAgent:    strings.Clone(ev.UserAgent),
		DeprecatedIn: m.DeprecatedIn,
		RemovedIn:    strings.Clone(m.RemovedIn),
		Replacement:  m.Replacement,
		Stage:        strings.Clone(ev.Stage),
		Node:         strings.Clone(node),
		Confidence:   m.Confidence,
	}
	if t := ev.EventTime(); !t.IsZero() {
		f.EventTime = timestamppb.New(t)
	}
	if r := ev.ObjectRef; r != nil {
		f.Subresource = strings.Clone(r.Subresource)
		f.Namespace = strings.Clone(r.Namespace)
		f.Name = strings.Clone(r.Name)
	}
	if len(ev.SourceIPs) > 0 {
		f.SourceIp = strings.Clone(ev.SourceIPs[0])
	}
	if st := ev.ResponseStatus; st != nil {
		f.ResponseCode = st.Code
	}
	for _, x := range m.Evidence {
		f.Evidence = append(f.Evidence, &auditlensv1.Evidence{Path: strings.Clone(x.Path), Value: strings.Clone(x.Value)})
	}
	if v, ok := ev.Annotation(auditevent.EnvelopeAnnotation); ok {
		// The cloud envelope the event came in (lib/envelope): where the finding came from.
		f.Evidence = append(f.Evidence, &auditlensv1.Evidence{Path: EnvelopeEvidencePath, Value: strings.Clone(v)})
	}
	f.Message = e.message(f, m, source)
	return f
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
		Source: source, ReplacementUnknown: m.ReplacementUnknown,
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
