package scan

import (
	"time"

	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
)

// JSONFinding is one line of `classify scan --format json`: the DESIGN.md finding fields in
// snake_case (the ClickHouse column names), then evidence, stage, node and confidence.
type JSONFinding struct {
	RuleID       string         `json:"rule_id"`
	Severity     string         `json:"severity"`
	Cluster      string         `json:"cluster"`
	AuditID      string         `json:"audit_id"`
	EventTime    string         `json:"event_time"`
	Verb         string         `json:"verb"`
	RequestURI   string         `json:"request_uri"`
	APIGroup     string         `json:"api_group"`
	APIVersion   string         `json:"api_version"`
	Resource     string         `json:"resource"`
	Subresource  string         `json:"subresource"`
	Namespace    string         `json:"namespace"`
	Name         string         `json:"name"`
	Username     string         `json:"username"`
	UserAgent    string         `json:"user_agent"`
	SourceIP     string         `json:"source_ip"`
	ResponseCode int32          `json:"response_code"`
	DeprecatedIn string         `json:"deprecated_in"`
	RemovedIn    string         `json:"removed_in"`
	Replacement  string         `json:"replacement"`
	Message      string         `json:"message"`
	Evidence     []JSONEvidence `json:"evidence"`
	Stage        string         `json:"stage"`
	Node         string         `json:"node,omitempty"`
	Confidence   string         `json:"confidence"`
	// RequestReceived is the request's requestReceivedTimestamp (RFC 3339, seconds), which
	// with audit_id and rule_id names the finding: two requests may share a client-chosen
	// Audit-ID. Absent for a sighting and for an event without one.
	RequestReceived string `json:"request_received,omitempty"`
}

// JSONEvidence is one matched path and value.
type JSONEvidence struct {
	Path  string `json:"path"`
	Value string `json:"value"`
}

// SeverityName is the lower-case name of s: info, warning, critical.
func SeverityName(s auditlensv1.Severity) string {
	switch s {
	case auditlensv1.Severity_SEVERITY_INFO:
		return "info"
	case auditlensv1.Severity_SEVERITY_WARNING:
		return "warning"
	case auditlensv1.Severity_SEVERITY_CRITICAL:
		return "critical"
	}
	return "unspecified"
}

func confidenceName(c auditlensv1.Confidence) string {
	switch c {
	case auditlensv1.Confidence_CONFIDENCE_LOW:
		return "low"
	case auditlensv1.Confidence_CONFIDENCE_MEDIUM:
		return "medium"
	case auditlensv1.Confidence_CONFIDENCE_HIGH:
		return "high"
	}
	return "unspecified"
}

// ToJSON converts a finding to its JSON line form.
func ToJSON(f *auditlensv1.Finding) JSONFinding {
	j := JSONFinding{
		RuleID: f.RuleId, Severity: SeverityName(f.Severity), Cluster: f.Cluster, AuditID: f.AuditId,
		Verb: f.Verb, RequestURI: f.RequestUri, APIGroup: f.ApiGroup, APIVersion: f.ApiVersion,
		Resource: f.Resource, Subresource: f.Subresource, Namespace: f.Namespace, Name: f.Name,
		Username: f.Username, UserAgent: f.UserAgent, SourceIP: f.SourceIp, ResponseCode: f.ResponseCode,
		DeprecatedIn: f.DeprecatedIn, RemovedIn: f.RemovedIn, Replacement: f.Replacement,
		Message: f.Message, Stage: f.Stage, Node: f.Node, Confidence: confidenceName(f.Confidence),
		Evidence: []JSONEvidence{},
	}
	if f.EventTime != nil {
		j.EventTime = f.EventTime.AsTime().UTC().Format(time.RFC3339Nano)
	}
	if f.RequestReceived != 0 {
		j.RequestReceived = time.Unix(f.RequestReceived, 0).UTC().Format(time.RFC3339)
	}
	for _, e := range f.Evidence {
		j.Evidence = append(j.Evidence, JSONEvidence{e.Path, e.Value})
	}
	return j
}

// jsonLines encodes findings as JSON lines (--format json).
type jsonLines struct{ out []byte }

func newJSONLines() *jsonLines { return &jsonLines{} }

// encode returns the JSON line of f, valid until the next call.
func (j *jsonLines) encode(f *auditlensv1.Finding) []byte {
	j.out = appendJSON(j.out[:0], f)
	return j.out
}
