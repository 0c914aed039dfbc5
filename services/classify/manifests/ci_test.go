package manifests

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/classify/internal/sariftest"
	"github.com/auditlens/auditlens/services/classify/rules"
)

// validateSARIF validates doc against the official SARIF 2.1.0 schema.
func validateSARIF(t *testing.T, doc []byte) error { return sariftest.Validate(t, doc) }

type sarifDoc = sariftest.Log

func sarif(t *testing.T, stdin string, args ...string) (sarifDoc, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(append([]string{"--format", "sarif"}, args...), strings.NewReader(stdin), &out, &errOut)
	if err := validateSARIF(t, out.Bytes()); err != nil {
		t.Fatalf("%v: not valid SARIF 2.1.0: %v\n%s\n%s", args, err, out.String(), errOut.String())
	}
	var d sarifDoc
	if err := json.Unmarshal(out.Bytes(), &d); err != nil || len(d.Runs) != 1 {
		t.Fatalf("%v: %v", args, err)
	}
	return d, errOut.String(), code
}

// fileLines returns the lines of file, from index 1.
func fileLines(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{""}, strings.Split(string(data), "\n")...)
}

// TestSARIFOnTheTree: the chart and List of testdata/tree give a SARIF log valid under the
// official schema: each result at the manifest's path as given and the line its object
// starts on, an error when it blocks the target and a warning otherwise; the exit code and
// the summary on stderr are those of the other formats.
func TestSARIFOnTheTree(t *testing.T) {
	tree := filepath.Join("testdata", "tree")
	d, errOut, code := sarif(t, "", "--target-version", "1.25", tree)
	if code != 3 || !strings.Contains(errOut, "classify manifests: 6 documents in 3 files, 7 findings, 3 blocking an upgrade to 1.25") {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	run := d.Runs[0]
	var ids []string
	for _, r := range run.Tool.Driver.Rules {
		ids = append(ids, r.ID)
	}
	want := []string{"removed-api", "seccomp-alpha-annotation", "beta-node-label", "psp", "service-topology-keys", "csr-key-encipherment-non-rsa"}
	if !slices.Equal(ids, want) {
		t.Errorf("rules %v, want %v", ids, want)
	}
	old := filepath.Join(tree, "chart", "templates", "old.yaml")
	lines := fileLines(t, old)
	type got struct {
		rule, level, uri string
		line             int
		object, source   string
	}
	var results []got
	for _, r := range run.Results {
		if run.Tool.Driver.Rules[r.RuleIndex].ID != r.RuleID {
			t.Errorf("ruleIndex %d for %s", r.RuleIndex, r.RuleID)
		}
		if len(r.Locations) != 1 || r.Locations[0].PhysicalLocation == nil || r.Locations[0].PhysicalLocation.Region == nil || len(r.Locations[0].LogicalLocations) != 1 {
			t.Fatalf("locations of %+v", r)
		}
		l := r.Locations[0]
		results = append(results, got{r.RuleID, r.Level, l.PhysicalLocation.ArtifactLocation.URI, l.PhysicalLocation.Region.StartLine,
			l.LogicalLocations[0].Name, l.LogicalLocations[0].FullyQualifiedName})
	}
	uri := filepath.ToSlash(old)
	list := filepath.ToSlash(filepath.Join(tree, "list.json"))
	wantResults := []got{
		{"removed-api", "error", uri, 3, "shop/web", uri + "#1"},
		{"seccomp-alpha-annotation", "warning", uri, 3, "shop/web", uri + "#1"},
		{"beta-node-label", "warning", uri, 3, "shop/web", uri + "#1"},
		{"psp", "error", uri, 25, "restricted", uri + "#2"},
		{"service-topology-keys", "error", uri, 32, "shop/web", uri + "#3"},
		{"removed-api", "warning", list, 1, "fs", list + "#1.items[0]"}, // removed in 1.32, after the target
		{"csr-key-encipherment-non-rsa", "warning", list, 1, "csr-ec", list + "#1.items[1]"},
	}
	if !slices.Equal(results, wantResults) {
		t.Errorf("results:\n%v\nwant\n%v", results, wantResults)
	}
	// The lines are where the objects start in the file.
	for _, c := range []struct {
		line int
		want string
	}{{3, "apiVersion: extensions/v1beta1"}, {25, "apiVersion: policy/v1beta1"}, {28, "  name: restricted"}, {32, "apiVersion: v1"}, {33, "kind: Service"}} {
		if lines[c.line] != c.want {
			t.Errorf("%s:%d is %q, want %q", old, c.line, lines[c.line], c.want)
		}
	}
	if !strings.Contains(run.Results[0].Message.Text, "Move the manifest to apps/v1") {
		t.Errorf("message without the replacement: %s", run.Results[0].Message.Text)
	}
	// Before any of them: warnings, and exit 2.
	d, _, code = sarif(t, "", "--target-version", "1.15", tree)
	for _, r := range d.Runs[0].Results {
		if r.Level != "warning" {
			t.Errorf("target 1.15: %s is %s", r.RuleID, r.Level)
		}
	}
	if code != 2 {
		t.Errorf("target 1.15: exit %d", code)
	}
	// stdin is no file: the object only.
	d, _, code = sarif(t, "apiVersion: batch/v1beta1\nkind: CronJob\nmetadata: {name: nightly}\n", "-")
	if r := d.Runs[0].Results; code != 3 || len(r) != 1 || r[0].Locations[0].PhysicalLocation != nil ||
		r[0].Locations[0].LogicalLocations[0].FullyQualifiedName != "stdin#1" || r[0].Level != "error" {
		t.Errorf("stdin: exit %d, %+v", code, r)
	}
	// Nothing found: a valid log without results.
	if d, _, code := sarif(t, "", filepath.Join(tree, "chart", "templates", "clean.yml")); code != 0 || len(d.Runs[0].Results) != 0 {
		t.Errorf("clean: exit %d, %+v", code, d.Runs[0].Results)
	}
}

// TestDocumentLines: CheckAt gives each object the line its document starts on, counted as
// an editor does, whatever precedes it (comments, blank lines, markers, empty documents,
// "..." ends, CRLF, content on the marker line); the items of a List and the documents of a
// Helm release stored in the file are at the line of the document that holds them.
func TestDocumentLines(t *testing.T) {
	cron := func(name string) string {
		return "apiVersion: batch/v1beta1\nkind: CronJob\nmetadata: {name: " + name + "}\n"
	}
	release := toJSON(t, storage(t, "Secret", "web", "shop", 3, "deployed", releaseManifest))
	parts := []string{
		"# leading comment\n\n",        // 1-2
		"---\n",                        // 3
		"# Source: a.yaml\n\n",         // 4-5
		cron("a"),                      // 6-8
		"---\n---\n# only a comment\n", // 9-11
		"---\n",                        // 12
		cron("b"),                      // 13-15
		"...\n",                        // 16
		"--- {apiVersion: batch/v1beta1, kind: CronJob, metadata: {name: c}}\n", // 17
		"---\r\n\r\n" + strings.ReplaceAll(cron("d"), "\n", "\r\n"),             // 18-22 (d at 20)
		"---\n", // 23
		`{"apiVersion": "v1", "kind": "List", "items": [` + "\n" + // 24
			`{"apiVersion": "batch/v1beta1", "kind": "CronJob", "metadata": {"name": "e"}}]}` + "\n", // 25
		"---\n",        // 26
		release + "\n", // 27
	}
	data := strings.Join(parts, "")
	cat, err := rules.Load()
	if err != nil {
		t.Fatal(err)
	}
	c := &Checker{Engine: rules.NewEngine(cat)}
	got := map[string]Location{}
	if _, err := c.CheckAt("f.yaml", []byte(data), func(at Location, f *auditlensv1.Finding) {
		if f.RuleId == rules.RemovedAPI {
			got[f.Name] = at
		}
	}); err != nil {
		t.Fatal(err)
	}
	want := map[string]Location{
		"a": {"f.yaml#1", "f.yaml", 6}, "b": {"f.yaml#2", "f.yaml", 13}, "c": {"f.yaml#3", "f.yaml", 17},
		"d": {"f.yaml#4", "f.yaml", 20}, "e": {"f.yaml#5.items[0]", "f.yaml", 24},
	}
	lines := strings.Split(data, "\n")
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %+v, want %+v", name, got[name], w)
		}
		// Checked against the text: the line names the object or starts it.
		if l := lines[w.Line-1]; !strings.Contains(l, "name: "+name) && !strings.HasPrefix(l, "apiVersion") && !strings.HasPrefix(l, "{") {
			t.Errorf("%s: line %d is %q", name, w.Line, l)
		}
	}
	// The release's Ingress: in the Secret's document, line 27.
	if at := got["web"]; at.File != "f.yaml" || at.Line != 27 || !strings.HasPrefix(at.Source, "f.yaml#6 helm release shop/web revision 3") {
		t.Errorf("release: %+v", at)
	}
	// Check keeps naming the source only, as before.
	var sources []string
	if _, err := c.Check("f.yaml", []byte(cron("a")), func(source string, _ *auditlensv1.Finding) { sources = append(sources, source) }); err != nil || !slices.Equal(sources, []string{"f.yaml#1"}) {
		t.Errorf("Check: %v %v", sources, err)
	}
}

// hostileName is an object name a manifest's author controls: markup, an entity, a quote and
// a CDATA end.
const hostileName = `<x a="1">&amp; ]]> "q" <![CDATA[`

// TestJUnitManifests: one test case per rule, API and object, failed when it blocks and
// skipped when it does not; the counts add up; a hostile object name is escaped by the
// encoder and read back exactly by an XML parser.
func TestJUnitManifests(t *testing.T) {
	in := "apiVersion: batch/v1beta1\nkind: CronJob\nmetadata:\n  name: " + jsonQuote(hostileName) + "\n" +
		"---\napiVersion: flowcontrol.apiserver.k8s.io/v1beta3\nkind: FlowSchema\nmetadata: {name: fs}\n"
	var out, errOut bytes.Buffer
	code := Main([]string{"--format", "junit", "--target-version", "1.30", "-"}, strings.NewReader(in), &out, &errOut)
	if code != 3 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, raw := range []string{hostileName, "]]>", `<x a=`} {
		if strings.Contains(out.String(), raw) {
			t.Errorf("%q unescaped:\n%s", raw, out.String())
		}
	}
	var d struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Skipped  int `xml:"skipped,attr"`
		Suite    struct {
			Name     string `xml:"name,attr"`
			Tests    int    `xml:"tests,attr"`
			Failures int    `xml:"failures,attr"`
			Skipped  int    `xml:"skipped,attr"`
			Cases    []struct {
				Name      string `xml:"name,attr"`
				Classname string `xml:"classname,attr"`
				Failure   *struct {
					Text string `xml:",chardata"`
				} `xml:"failure"`
				Skipped *struct{} `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	dec := xml.NewDecoder(&out)
	dec.Strict = true
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("not XML: %v", err)
	}
	s := d.Suite
	failures, skipped := 0, 0
	for _, c := range s.Cases {
		if c.Failure != nil {
			failures++
		}
		if c.Skipped != nil {
			skipped++
		}
	}
	if s.Name != "classify manifests" || s.Tests != len(s.Cases) || s.Tests != 2 || s.Failures != failures || s.Failures != 1 ||
		s.Skipped != skipped || s.Skipped != 1 || d.Tests != s.Tests || d.Failures != s.Failures || d.Skipped != s.Skipped {
		t.Fatalf("counts: %+v", d)
	}
	if c := s.Cases[0]; c.Classname != "removed-api" || c.Name != "batch/v1beta1 cronjobs "+hostileName+" (stdin#1)" ||
		c.Failure == nil || !strings.Contains(c.Failure.Text, "batch/v1") {
		t.Errorf("CronJob: %+v", c)
	}
	if c := s.Cases[1]; c.Name != "flowcontrol.apiserver.k8s.io/v1beta3 flowschemas fs (stdin#2)" || c.Skipped == nil {
		t.Errorf("FlowSchema, removed in 1.32: %+v", c)
	}
	if !strings.Contains(errOut.String(), "2 documents in 1 file, 2 findings, 1 blocking an upgrade to 1.30") {
		t.Errorf("summary: %s", errOut.String())
	}
}

func jsonQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
