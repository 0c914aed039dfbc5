package scan

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/auditlens/auditlens/lib/kubeversion"
	"github.com/auditlens/auditlens/lib/printable"
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
	for _, e := range f.Evidence {
		j.Evidence = append(j.Evidence, JSONEvidence{e.Path, e.Value})
	}
	return j
}

// summary groups findings by rule, API and caller.
type summary struct {
	rules map[string]*ruleSum
}

type ruleSum struct {
	id, severity string
	count        int
	apis         map[string]*apiSum
}

type apiSum struct {
	api, removedIn, deprecatedIn, replacement, message string
	count                                              int
	blocking                                           bool
	callers                                            map[string]int
}

func (s *summary) add(f *auditlensv1.Finding, blocking bool) {
	if s.rules == nil {
		s.rules = map[string]*ruleSum{}
	}
	// Every string shown comes from the event or a rules file: escaped once, here.
	r := s.rules[f.RuleId]
	if r == nil {
		r = &ruleSum{id: printable.String(f.RuleId), severity: SeverityName(f.Severity), apis: map[string]*apiSum{}}
		s.rules[f.RuleId] = r
	}
	r.count++
	api := printable.String(strings.TrimSpace(groupVersion(f.ApiGroup, f.ApiVersion) + " " + f.Resource))
	if api == "" {
		api = "(no API)"
	}
	a := r.apis[api]
	if a == nil {
		a = &apiSum{api: api, removedIn: printable.String(f.RemovedIn), deprecatedIn: printable.String(f.DeprecatedIn),
			replacement: printable.String(f.Replacement), message: printable.String(f.Message), callers: map[string]int{}}
		r.apis[api] = a
	}
	a.count++
	a.blocking = a.blocking || blocking
	caller := printable.String(f.Username)
	if f.UserAgent != "" {
		caller += "  " + printable.String(f.UserAgent)
	}
	a.callers[caller]++
}

func groupVersion(g, v string) string {
	if g == "" {
		return v
	}
	return g + "/" + v
}

var severityOrder = map[string]int{"critical": 0, "warning": 1, "info": 2}

// write prints the summary: rules by severity then count, their APIs, their callers.
func (s *summary) write(w io.Writer, target kubeversion.Version) {
	rules := slices.Collect(maps.Values(s.rules))
	slices.SortFunc(rules, func(a, b *ruleSum) int {
		if d := severityOrder[a.severity] - severityOrder[b.severity]; d != 0 {
			return d
		}
		if a.count != b.count {
			return b.count - a.count
		}
		return strings.Compare(a.id, b.id)
	})
	for _, r := range rules {
		fmt.Fprintf(w, "\n%s (%s): %d finding%s\n", r.id, r.severity, r.count, plural(r.count))
		apis := slices.Collect(maps.Values(r.apis))
		slices.SortFunc(apis, func(a, b *apiSum) int {
			if a.count != b.count {
				return b.count - a.count
			}
			return strings.Compare(a.api, b.api)
		})
		for _, a := range apis {
			line := fmt.Sprintf("  %s: %d", a.api, a.count)
			if a.deprecatedIn != "" {
				line += ", deprecated in " + a.deprecatedIn
			}
			if a.removedIn != "" {
				line += ", removed in " + a.removedIn
			}
			if a.replacement != "" {
				line += ", use " + a.replacement
			}
			if a.blocking {
				if !target.IsZero() {
					line += "  [blocks " + target.String() + "]"
				} else {
					line += "  [removed]"
				}
			}
			fmt.Fprintln(w, line)
			callers := slices.Collect(maps.Keys(a.callers))
			slices.SortFunc(callers, func(x, y string) int {
				if a.callers[x] != a.callers[y] {
					return a.callers[y] - a.callers[x]
				}
				return strings.Compare(x, y)
			})
			for i, c := range callers {
				if i == 10 {
					fmt.Fprintf(w, "    ... %d more callers\n", len(callers)-10)
					break
				}
				fmt.Fprintf(w, "    %6d  %s\n", a.callers[c], c)
			}
			fmt.Fprintf(w, "    what to do: %s\n", a.message)
		}
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// tableWriter prints findings as aligned columns.
type tableWriter struct {
	tw     *tabwriter.Writer
	header bool
}

func newTable(w io.Writer) *tableWriter {
	return &tableWriter{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
}

func (t *tableWriter) row(f *auditlensv1.Finding) {
	if !t.header {
		fmt.Fprintln(t.tw, "TIME\tSEVERITY\tRULE\tREMOVED\tAPI\tVERB\tOBJECT\tUSER\tUSER AGENT")
		t.header = true
	}
	ts := ""
	if f.EventTime != nil {
		ts = f.EventTime.AsTime().UTC().Format("2006-01-02T15:04:05Z")
	}
	obj := f.Name
	if f.Namespace != "" {
		obj = f.Namespace + "/" + f.Name
	}
	if f.Subresource != "" {
		obj += " (" + f.Subresource + ")"
	}
	// Every field but the time and severity comes from the event or a rules file, and a tab
	// would also break the columns: all are escaped.
	p := printable.String
	fmt.Fprintf(t.tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ts, SeverityName(f.Severity), p(f.RuleId), dash(p(f.RemovedIn)),
		dash(p(strings.TrimSpace(groupVersion(f.ApiGroup, f.ApiVersion)+" "+f.Resource))), p(f.Verb), dash(p(obj)), p(f.Username),
		printable.Truncate(f.UserAgent, 48))
}

func (t *tableWriter) flush() { _ = t.tw.Flush() }

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
