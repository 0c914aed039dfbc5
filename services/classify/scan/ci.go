package scan

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/auditlens/auditlens/lib/buildinfo"
	"github.com/auditlens/auditlens/lib/printable"
	"github.com/auditlens/auditlens/services/classify/rules"
)

// The machine formats for CI (--format sarif and --format junit) of classify scan and classify
// manifests. Both commands turn what they found into CIResults and write them with WriteSARIF
// or WriteJUnit; stdout then holds that document only, the summary going to stderr. The
// strings come from audit events and manifests (attacker-controlled): they are encoded by
// encoding/json and encoding/xml, never pasted into the document by hand.

// SARIF names the tool and the schema in a SARIF log.
const (
	SARIFVersion   = "2.1.0"
	SARIFSchema    = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
	ToolName       = "auditlens classify"
	InformationURI = "https://github.com/auditlens/auditlens"
)

// CIResult is one SARIF result and one JUnit test case: a finding of classify manifests, or
// the findings of classify scan of one rule, API and caller.
type CIResult struct {
	RuleID   string
	Severity string // info, warning, critical
	// Blocking: the finding blocks --target-version (SARIF level "error", a JUnit failure);
	// else SARIF level "warning", a skipped JUnit test case.
	Blocking bool
	// Message is what the finding says (and what to use instead).
	Message string
	// File is the file the result is in, as given on the command line ("": none, such as stdin
	// or a cluster), and Line the line in it (0: unknown).
	File string
	Line int
	// Logical names what the result is about when it is not a place in a file (the caller of
	// an audit log): SARIF logicalLocations.
	Logical *SARIFLogicalLocation
	// Case names the JUnit test case, in its class (the rule): test cases of one rule with the
	// same name are merged into one.
	Case string
	// Properties are the result's SARIF property bag: counts and the finding's fields.
	Properties map[string]any
}

// SARIFLog is a SARIF 2.1.0 log: the part of the format written here.
type SARIFLog struct {
	Schema  string     `json:"$schema"`
	Version string     `json:"version"`
	Runs    []SARIFRun `json:"runs"`
}

// SARIFRun is one run of the tool.
type SARIFRun struct {
	Tool    SARIFTool     `json:"tool"`
	Results []SARIFResult `json:"results"`
}

// SARIFTool is the tool that produced a run.
type SARIFTool struct {
	Driver SARIFDriver `json:"driver"`
}

// SARIFDriver describes classify and the rules that produced results.
type SARIFDriver struct {
	Name           string      `json:"name"`
	Version        string      `json:"version,omitempty"`
	InformationURI string      `json:"informationUri"`
	Rules          []SARIFRule `json:"rules"`
}

// SARIFRule is a reportingDescriptor: one rule of the catalogue.
type SARIFRule struct {
	ID                   string              `json:"id"`
	ShortDescription     SARIFMessage        `json:"shortDescription"`
	FullDescription      *SARIFMessage       `json:"fullDescription,omitempty"`
	HelpURI              string              `json:"helpUri,omitempty"`
	DefaultConfiguration *SARIFConfiguration `json:"defaultConfiguration,omitempty"`
	Properties           map[string]any      `json:"properties,omitempty"`
}

// SARIFConfiguration is a rule's default reportingConfiguration.
type SARIFConfiguration struct {
	Level string `json:"level"`
}

// SARIFMessage is a plain text message.
type SARIFMessage struct {
	Text string `json:"text"`
}

// SARIFResult is one result.
type SARIFResult struct {
	RuleID     string          `json:"ruleId"`
	RuleIndex  int             `json:"ruleIndex"`
	Level      string          `json:"level"`
	Message    SARIFMessage    `json:"message"`
	Locations  []SARIFLocation `json:"locations,omitempty"`
	Properties map[string]any  `json:"properties,omitempty"`
}

// SARIFLocation is where a result is: a place in a file, and what it is about.
type SARIFLocation struct {
	PhysicalLocation *SARIFPhysicalLocation `json:"physicalLocation,omitempty"`
	LogicalLocations []SARIFLogicalLocation `json:"logicalLocations,omitempty"`
}

// SARIFPhysicalLocation is a file and a region of it.
type SARIFPhysicalLocation struct {
	ArtifactLocation SARIFArtifactLocation `json:"artifactLocation"`
	Region           *SARIFRegion          `json:"region,omitempty"`
}

// SARIFArtifactLocation names a file by a URI reference (a relative path stays relative).
type SARIFArtifactLocation struct {
	URI string `json:"uri"`
}

// SARIFRegion is a line of a file.
type SARIFRegion struct {
	StartLine int `json:"startLine"`
}

// SARIFLogicalLocation names something that is not a place in a file: the caller of an
// audit log (its user, and user and user agent in fullyQualifiedName), or a manifest's object.
type SARIFLogicalLocation struct {
	Name               string         `json:"name,omitempty"`
	FullyQualifiedName string         `json:"fullyQualifiedName,omitempty"`
	Kind               string         `json:"kind,omitempty"`
	Properties         map[string]any `json:"properties,omitempty"`
}

// ruleSummaries are the SARIF short descriptions of the built-in rules (the catalogue holds
// their messages, not a one-line description).
var ruleSummaries = map[string]string{
	rules.RemovedAPI:               "An API version removed from Kubernetes (or from a component's CRDs) is in use",
	rules.DeprecatedAPI:            "A deprecated API version is in use",
	rules.PSP:                      "PodSecurityPolicy, removed in Kubernetes 1.25, is in use",
	rules.SeccompAlphaAnnotation:   "An alpha seccomp annotation, ignored since Kubernetes 1.27, is set",
	rules.AppArmorAnnotation:       "A deprecated AppArmor annotation is set",
	rules.CSRKeyEnciphermentNonRSA: "A CertificateSigningRequest asks for key encipherment with a non-RSA key",
	rules.BetaNodeLabel:            "A deprecated beta node label is selected on",
	rules.NodeRoleMasterLabel:      "The deprecated node-role.kubernetes.io/master label or taint is used",
	rules.ServiceTopologyKeys:      "Service spec.topologyKeys, removed in Kubernetes 1.22, is set",
	rules.PodSecurityViolation:     "A workload violates its namespace's audited Pod Security level",
	rules.LegacyAuthProviderClient: "A client may use an in-tree auth-provider removed in kubectl and client-go 1.26",
	rules.LegacySAToken:            "A legacy secret-based service-account token is used",
	rules.VersionSkew:              "A kubelet or kube-proxy the version-skew policy stops supporting at some control-plane release",
	rules.KubectlVersionSkew:       "A kubectl supported against a range of kube-apiserver releases only",
	rules.NodeContainerRuntime:     "A node runs a container runtime that kubelets stop supporting",
	rules.GitRepoVolume:            "A pod or template mounts a gitRepo volume, whose driver is disabled",
	rules.ServiceExternalIPs:       "A Service sets the deprecated spec.externalIPs",
	rules.ServicePreferClose:       "A Service sets the deprecated trafficDistribution PreferClose",
	rules.IngressNginx:             "The retired ingress-nginx controller is in use",
	rules.EvictionBlocked:          "An eviction was refused by a PodDisruptionBudget: node drains wait on it",
	rules.WebhookFailedOpen:        "An admission webhook failed and was ignored",
	rules.NodesProxy:               "A client uses nodes/proxy, which reaches every kubelet API",
}

// sarifRule describes rule id from the catalogue: a short description, its releases and
// replacement when the catalogue gives them. The catalogue holds no URLs: no helpUri.
func sarifRule(cat *rules.Catalogue, id string) SARIFRule {
	r := SARIFRule{ID: id, ShortDescription: SARIFMessage{Text: ruleSummaries[id]}}
	if r.ShortDescription.Text == "" {
		r.ShortDescription.Text = "auditlens classify rule " + id
	}
	var spec *rules.RuleSpec
	if cat != nil {
		spec = cat.Rule(id)
	}
	if spec == nil {
		return r
	}
	var facts []string
	if spec.DeprecatedIn != "" {
		facts = append(facts, "deprecated in Kubernetes "+spec.DeprecatedIn)
	}
	if spec.RemovedIn != "" {
		facts = append(facts, "removed in Kubernetes "+spec.RemovedIn)
	}
	if spec.Replacement != "" {
		facts = append(facts, "use instead: "+spec.Replacement)
	}
	if len(facts) > 0 {
		r.FullDescription = &SARIFMessage{Text: sarifText(r.ShortDescription.Text + ": " + strings.Join(facts, "; ") + ".")}
	}
	if spec.Severity != "" {
		r.Properties = map[string]any{"severity": spec.Severity}
	}
	return r
}

// sarifText escapes text for a SARIF plain text message, where "[text](target)" is an
// embedded link (SARIF 2.1.0 §3.11.6): literal square brackets and backslashes get a
// backslash, so a user agent or object name cannot make a link.
func sarifText(s string) string {
	if !strings.ContainsAny(s, `[]\`) {
		return s
	}
	return strings.NewReplacer(`\`, `\\`, `[`, `\[`, `]`, `\]`).Replace(s)
}

// FileURI is path as a relative (or absolute) URI reference: slashes, and what a URI does
// not allow percent-encoded.
func FileURI(path string) string {
	return (&url.URL{Path: filepath.ToSlash(path)}).String()
}

// WriteSARIF writes results as a SARIF 2.1.0 log of one run of classify: the rules that
// produced results, in the order they first did, described from cat. The strings are escaped
// as encoding/json escapes them, and DEL and the C1 controls as well (lib/printable.JSON).
func WriteSARIF(w io.Writer, cat *rules.Catalogue, results []CIResult) error {
	run := SARIFRun{
		Tool:    SARIFTool{Driver: SARIFDriver{Name: ToolName, Version: buildinfo.Get().Version, InformationURI: InformationURI, Rules: []SARIFRule{}}},
		Results: []SARIFResult{},
	}
	index := map[string]int{}
	for _, r := range results {
		i, ok := index[r.RuleID]
		if !ok {
			i = len(run.Tool.Driver.Rules)
			index[r.RuleID] = i
			run.Tool.Driver.Rules = append(run.Tool.Driver.Rules, sarifRule(cat, r.RuleID))
		}
		res := SARIFResult{RuleID: r.RuleID, RuleIndex: i, Level: "warning", Message: SARIFMessage{Text: sarifText(r.Message)}, Properties: r.Properties}
		if r.Blocking {
			res.Level = "error"
		}
		var loc SARIFLocation
		if r.File != "" {
			loc.PhysicalLocation = &SARIFPhysicalLocation{ArtifactLocation: SARIFArtifactLocation{URI: FileURI(r.File)}}
			if r.Line > 0 {
				loc.PhysicalLocation.Region = &SARIFRegion{StartLine: r.Line}
			}
		}
		if r.Logical != nil {
			loc.LogicalLocations = []SARIFLogicalLocation{*r.Logical}
		}
		if loc.PhysicalLocation != nil || loc.LogicalLocations != nil {
			res.Locations = []SARIFLocation{loc}
		}
		run.Results = append(run.Results, res)
	}
	b, err := json.MarshalIndent(SARIFLog{Schema: SARIFSchema, Version: SARIFVersion, Runs: []SARIFRun{run}}, "", "  ")
	if err != nil {
		return err
	}
	b = printable.JSON(nil, append(b, '\n'))
	_, err = w.Write(b)
	return err
}

// JUnitTestSuites is the root of a JUnit XML report.
type JUnitTestSuites struct {
	XMLName  xml.Name         `xml:"testsuites"`
	Name     string           `xml:"name,attr"`
	Tests    int              `xml:"tests,attr"`
	Failures int              `xml:"failures,attr"`
	Errors   int              `xml:"errors,attr"`
	Skipped  int              `xml:"skipped,attr"`
	Suites   []JUnitTestSuite `xml:"testsuite"`
}

// JUnitTestSuite is the one suite of a report: the run of a command.
type JUnitTestSuite struct {
	Name     string          `xml:"name,attr"`
	Tests    int             `xml:"tests,attr"`
	Failures int             `xml:"failures,attr"`
	Errors   int             `xml:"errors,attr"`
	Skipped  int             `xml:"skipped,attr"`
	Cases    []JUnitTestCase `xml:"testcase"`
}

// JUnitTestCase is one rule and API (and caller or object): failed when it blocks the
// target, skipped when it does not.
type JUnitTestCase struct {
	Name      string       `xml:"name,attr"`
	Classname string       `xml:"classname,attr"`
	File      string       `xml:"file,attr,omitempty"`
	Line      int          `xml:"line,attr,omitempty"`
	Failure   *JUnitResult `xml:"failure,omitempty"`
	Error     *JUnitResult `xml:"error,omitempty"`
	Skipped   *JUnitResult `xml:"skipped,omitempty"`
}

// JUnitResult is a failure, an error or a skip: a one-line message and the full text.
type JUnitResult struct {
	Message string `xml:"message,attr,omitempty"`
	Type    string `xml:"type,attr,omitempty"`
	Text    string `xml:",chardata"`
}

// JUnit is the report for WriteJUnit: suite names the command ("classify scan"), blocks
// says what a failure blocks ("blocks an upgrade to 1.30"), and inputErrors counts the inputs
// that could not be read in full (each an error test case, so the report does not look clean).
type JUnit struct {
	Suite       string
	Blocks      string
	InputErrors int
}

// WriteJUnit writes results as a JUnit XML report of one test suite: one test case per rule
// (its classname) and case name, a failure when it blocks the target and a skip when it does
// not (a deprecation, or a removal after the target), so that a report with findings is never
// all green and only what blocks fails; results with the same rule and name are one test case.
// No findings: one passing test case, "no findings". Every string is escaped by encoding/xml.
func WriteJUnit(w io.Writer, j JUnit, results []CIResult) error {
	type merged struct {
		tc       JUnitTestCase
		blocking bool
		messages []string
		severity string
	}
	var order []*merged
	byKey := map[[2]string]*merged{}
	for _, r := range results {
		k := [2]string{r.RuleID, r.Case}
		m := byKey[k]
		if m == nil {
			m = &merged{tc: JUnitTestCase{Name: r.Case, Classname: r.RuleID, File: r.File, Line: r.Line}, severity: r.Severity}
			byKey[k] = m
			order = append(order, m)
		}
		m.blocking = m.blocking || r.Blocking
		m.messages = append(m.messages, r.Message)
	}
	suite := JUnitTestSuite{Name: j.Suite, Cases: []JUnitTestCase{}}
	for _, m := range order {
		tc := m.tc
		text := strings.Join(m.messages, "\n")
		if m.blocking {
			tc.Failure = &JUnitResult{Message: fmt.Sprintf("%s (%s): %s", tc.Classname, m.severity, j.Blocks), Type: tc.Classname, Text: text}
			suite.Failures++
		} else {
			tc.Skipped = &JUnitResult{Message: fmt.Sprintf("%s (%s): does not block the upgrade", tc.Classname, m.severity), Text: text}
			suite.Skipped++
		}
		suite.Cases = append(suite.Cases, tc)
	}
	if j.InputErrors > 0 {
		suite.Cases = append(suite.Cases, JUnitTestCase{Name: "inputs read", Classname: "classify", Error: &JUnitResult{
			Message: fmt.Sprintf("%d input%s not read in full: see the errors on stderr", j.InputErrors, plural(j.InputErrors)), Type: "input"}})
		suite.Errors++
	}
	if len(suite.Cases) == 0 {
		suite.Cases = append(suite.Cases, JUnitTestCase{Name: "no findings", Classname: "classify"})
	}
	suite.Tests = len(suite.Cases)
	doc := JUnitTestSuites{Name: "auditlens " + j.Suite, Tests: suite.Tests, Failures: suite.Failures, Errors: suite.Errors,
		Skipped: suite.Skipped, Suites: []JUnitTestSuite{suite}}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
