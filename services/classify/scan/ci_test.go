package scan

import (
	"bufio"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/services/classify/internal/sariftest"
)

// validateSARIF validates doc against the official SARIF 2.1.0 schema.
func validateSARIF(t *testing.T, doc []byte) error { return sariftest.Validate(t, doc) }

// sarifDoc is what the tests read of a SARIF log.
type sarifDoc = sariftest.Log

func parseSARIF(t *testing.T, out string) sarifDoc {
	t.Helper()
	var d sarifDoc
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("stdout is not one JSON document: %v\n%s", err, out)
	}
	if len(d.Runs) != 1 {
		t.Fatalf("%d runs, want 1", len(d.Runs))
	}
	return d
}

// lineOf returns line n (from 1) of file.
func lineOf(t *testing.T, file string, n int) string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for i := 1; sc.Scan(); i++ {
		if i == n {
			return sc.Text()
		}
	}
	t.Fatalf("%s has no line %d", file, n)
	return ""
}

// TestSARIFOnTheRealWorldCorpus: the genuine audit logs of the corpus give a SARIF log valid
// under the official schema, one result per rule, API and caller, located at the caller and
// at the file and line of its first request; stdout holds the log only, the summary is on
// stderr, and the exit code is that of the other formats.
func TestSARIFOnTheRealWorldCorpus(t *testing.T) {
	gce := filepath.Join(corpus, "k8s-perf-tests-gce-scale.jsonl")
	kubeadm := filepath.Join(corpus, "kubeadm-1.14.6-audit-blog-zh.jsonl")
	openshift := filepath.Join(corpus, "openshift-cluster-logging-operator-testdata.jsonl")
	for _, parallel := range []string{"1", "4"} {
		code, out, errOut := run(t, "", "--format", "sarif", "--target-version", "1.25", "--parallel", parallel, gce, kubeadm, openshift)
		if code != ExitRemoved {
			t.Fatalf("exit %d, want %d: %s", code, ExitRemoved, errOut)
		}
		if err := validateSARIF(t, []byte(out)); err != nil {
			t.Fatalf("not valid SARIF 2.1.0: %v\n%s", err, out)
		}
		if !strings.Contains(errOut, "classify scan: 32 events in 3 inputs, 16 findings, 10 blocking an upgrade from 1.20 to 1.25 (7 new in 1.25, 3 failing") ||
			!strings.Contains(errOut, "removed-api (critical): 3 findings") {
			t.Errorf("summary missing from stderr:\n%s", errOut)
		}
		d := parseSARIF(t, out)
		drv := d.Runs[0].Tool.Driver
		if d.Version != "2.1.0" || drv.Name != "auditlens classify" || drv.InformationURI != "https://github.com/auditlens/auditlens" || drv.Version == "" {
			t.Errorf("log header: %+v %+v", d, drv)
		}
		var ids []string
		for _, r := range drv.Rules {
			ids = append(ids, r.ID)
			if r.ShortDescription.Text == "" {
				t.Errorf("rule %s: no short description", r.ID)
			}
		}
		if strings.Join(ids, ",") != "removed-api,version-skew,legacy-sa-token" {
			t.Errorf("rules %v, want removed-api, version-skew (the kubelets 1.14 and 1.19) and legacy-sa-token", ids)
		}
		res := d.Runs[0].Results
		// 9 API and token findings (elasticsearch-operator called prometheusrules twice) and 7
		// kubelets out of the version-skew policy of 1.25 (one finding each).
		if len(res) != 15 {
			t.Fatalf("%d results, want 15", len(res))
		}
		levels := map[string]int{}
		found := false
		for _, r := range res {
			levels[r.RuleID+" "+r.Level]++
			if drv.Rules[r.RuleIndex].ID != r.RuleID {
				t.Errorf("ruleIndex %d of %s names %s", r.RuleIndex, r.RuleID, drv.Rules[r.RuleIndex].ID)
			}
			if len(r.Locations) != 1 || r.Locations[0].PhysicalLocation == nil || r.Locations[0].PhysicalLocation.Region == nil || len(r.Locations[0].LogicalLocations) != 1 {
				t.Fatalf("result without its locations: %+v", r)
			}
			loc := r.Locations[0]
			file := filepath.FromSlash(loc.PhysicalLocation.ArtifactLocation.URI)
			line := lineOf(t, file, loc.PhysicalLocation.Region.StartLine)
			who := loc.LogicalLocations[0]
			// The line is the caller's first request: it names the user and user agent.
			if !strings.Contains(line, `"username":"`+who.Name+`"`) || !strings.Contains(line, fmt.Sprint(who.Properties["userAgent"])) {
				t.Errorf("%s:%d is not a request of %s:\n%s", file, loc.PhysicalLocation.Region.StartLine, who.FullyQualifiedName, line)
			}
			if who.FullyQualifiedName != who.Name+" ("+fmt.Sprint(who.Properties["userAgent"])+")" {
				t.Errorf("fullyQualifiedName %q", who.FullyQualifiedName)
			}
			if who.Name == "system:node:gce-scale-cluster-minion-group-2-v1fj" && r.RuleID == "removed-api" {
				found = true
				if file != gce || loc.PhysicalLocation.Region.StartLine != 2 || r.RuleID != "removed-api" || r.Level != "error" ||
					r.Properties["api"] != "coordination.k8s.io/v1beta1 leases" || r.Properties["count"] != float64(1) ||
					!strings.Contains(r.Message.Text, "coordination.k8s.io/v1") {
					t.Errorf("the kubelet's lease result: %s:%d %+v", file, loc.PhysicalLocation.Region.StartLine, r)
				}
			}
			if who.Name == "system:serviceaccount:openshift-operators-redhat:elasticsearch-operator" &&
				(r.Properties["count"] != float64(2) || loc.PhysicalLocation.Region.StartLine != 1 || !strings.Contains(r.Message.Text, "2 matching requests")) {
				t.Errorf("two requests of one caller: %+v", r)
			}
		}
		if !found {
			t.Error("no result for system:node:gce-scale-cluster-minion-group-2-v1fj")
		}
		if levels["removed-api error"] != 3 || levels["legacy-sa-token warning"] != 5 || levels["version-skew error"] != 7 || len(levels) != 3 {
			t.Errorf("levels %v", levels)
		}
	}
	// Before the removals (the leases' 1.22, the 1.14 kubelets' 1.17): a warning, and exit 2,
	// as in the other formats.
	code, out, _ := run(t, "", "--format", "sarif", "--target-version", "1.16", gce)
	if code != ExitFindings {
		t.Fatalf("exit %d, want %d", code, ExitFindings)
	}
	for _, r := range parseSARIF(t, out).Runs[0].Results {
		if r.Level != "warning" {
			t.Errorf("removed in 1.17 and 1.22, target 1.16: level %s", r.Level)
		}
	}
}

// TestSARIFGroupsRequests: a thousand requests of one caller on one removed API are one
// result with their count, at the line of the first; from stdin, without a file.
func TestSARIFGroupsRequests(t *testing.T) {
	var b strings.Builder
	b.WriteString(cleanEv + "\n" + deprecatedEv + "\n")
	for i := range 1000 {
		b.WriteString(strings.Replace(removedEv, `"auditID":"a1"`, fmt.Sprintf(`"auditID":"a%d"`, i), 1) + "\n")
	}
	f := write(t, "audit.log", b.String())
	code, out, errOut := run(t, "", "--format", "sarif", f)
	if code != ExitRemoved {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if err := validateSARIF(t, []byte(out)); err != nil {
		t.Fatal(err)
	}
	res := parseSARIF(t, out).Runs[0].Results
	if len(res) != 2 {
		t.Fatalf("%d results, want 2 (the deprecation and the removal)", len(res))
	}
	dep, rem := res[0], res[1]
	if dep.RuleID != "deprecated-api" || dep.Level != "warning" || dep.Locations[0].PhysicalLocation.Region.StartLine != 2 ||
		dep.Locations[0].LogicalLocations[0].Name != "old-proxy" {
		t.Errorf("deprecation: %+v", dep)
	}
	if rem.RuleID != "removed-api" || rem.Level != "error" || rem.Properties["count"] != float64(1000) || rem.Properties["blockingCount"] != float64(1000) ||
		rem.Locations[0].PhysicalLocation.Region.StartLine != 3 || rem.Locations[0].PhysicalLocation.ArtifactLocation.URI != filepath.ToSlash(f) ||
		rem.Locations[0].LogicalLocations[0].Name != "ci-bot" || rem.Locations[0].LogicalLocations[0].FullyQualifiedName != "ci-bot (helm/v3.8.0)" {
		t.Errorf("removal: %+v", rem)
	}
	// stdin is no file: the caller only.
	code, out, _ = run(t, removedEv+"\n", "--format", "sarif", "-")
	if code != ExitRemoved {
		t.Fatalf("stdin: exit %d", code)
	}
	res = parseSARIF(t, out).Runs[0].Results
	if len(res) != 1 || res[0].Locations[0].PhysicalLocation != nil || res[0].Locations[0].LogicalLocations[0].Name != "ci-bot" {
		t.Errorf("stdin: %+v", res)
	}
	// No findings: a valid log with no results, exit 0.
	code, out, _ = run(t, "", "--format", "sarif", write(t, "clean.log", cleanEv+"\n"))
	if err := validateSARIF(t, []byte(out)); code != ExitClean || err != nil || len(parseSARIF(t, out).Runs[0].Results) != 0 {
		t.Errorf("clean: exit %d, %v\n%s", code, err, out)
	}
}

// TestSARIFSchemaCatchesErrors: the validation fails on a log that breaks the schema, so the
// tests above can fail.
func TestSARIFSchemaCatchesErrors(t *testing.T) {
	_, out, _ := run(t, "", "--format", "sarif", write(t, "audit.log", removedEv+"\n"))
	for _, bad := range []struct{ from, to string }{
		{`"level": "error"`, `"level": "fatal"`},
		{`"startLine": 1`, `"startLine": 0`},
		{`"version": "2.1.0"`, `"version": "2.0"`},
		{`"ruleId": "removed-api",`, `"ruleId": "removed-api", "suppressions": 3,`},
	} {
		if !strings.Contains(out, bad.from) {
			t.Fatalf("no %s in\n%s", bad.from, out)
		}
		if err := validateSARIF(t, []byte(strings.Replace(out, bad.from, bad.to, 1))); err == nil {
			t.Errorf("%s: valid", bad.to)
		}
	}
}

// hostile is a user agent and user name an attacker controls: markup, an entity, a quote, a
// CDATA end, a SARIF embedded link.
const hostile = `<script>alert(1)</script> & "q" ]]> [x](https://evil.example) <![CDATA[`

func hostileEvent(id string) string {
	ev := strings.Replace(removedEv, `"auditID":"a1"`, `"auditID":"`+id+`"`, 1)
	ev = strings.Replace(ev, `"userAgent":"helm/v3.8.0"`, `"userAgent":`+jsonString(hostile), 1)
	return strings.Replace(ev, `"username":"ci-bot"`, `"username":`+jsonString("u"+hostile), 1)
}

// TestSARIFHostileCaller: the caller's user agent and name are JSON strings, kept exactly in
// the logical location; in the message, square brackets are escaped so they make no link.
func TestSARIFHostileCaller(t *testing.T) {
	code, out, _ := run(t, "", "--format", "sarif", write(t, "audit.log", hostileEvent("h1")+"\n"))
	if code != ExitRemoved {
		t.Fatalf("exit %d", code)
	}
	if err := validateSARIF(t, []byte(out)); err != nil {
		t.Fatal(err)
	}
	r := parseSARIF(t, out).Runs[0].Results[0]
	who := r.Locations[0].LogicalLocations[0]
	if who.Name != "u"+hostile || who.FullyQualifiedName != "u"+hostile+" ("+hostile+")" || who.Properties["userAgent"] != hostile {
		t.Errorf("caller: %+v", who)
	}
	if strings.Contains(r.Message.Text, "[x](https://evil.example)") || !strings.Contains(r.Message.Text, `\[x\](https://evil.example)`) {
		t.Errorf("message makes a link: %s", r.Message.Text)
	}
}

// junitDoc is a JUnit report as a JUnit reader sees it.
type junitDoc struct {
	XMLName  xml.Name `xml:"testsuites"`
	Tests    int      `xml:"tests,attr"`
	Failures int      `xml:"failures,attr"`
	Skipped  int      `xml:"skipped,attr"`
	Errors   int      `xml:"errors,attr"`
	Suites   []struct {
		Name     string `xml:"name,attr"`
		Tests    int    `xml:"tests,attr"`
		Failures int    `xml:"failures,attr"`
		Skipped  int    `xml:"skipped,attr"`
		Errors   int    `xml:"errors,attr"`
		Cases    []struct {
			Name      string `xml:"name,attr"`
			Classname string `xml:"classname,attr"`
			File      string `xml:"file,attr"`
			Line      int    `xml:"line,attr"`
			Failure   *struct {
				Message string `xml:"message,attr"`
				Text    string `xml:",chardata"`
			} `xml:"failure"`
			Skipped *struct {
				Message string `xml:"message,attr"`
				Text    string `xml:",chardata"`
			} `xml:"skipped"`
			Error *struct {
				Message string `xml:"message,attr"`
			} `xml:"error"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// parseJUnit decodes a report strictly and checks its counts against its test cases.
func parseJUnit(t *testing.T, out string) junitDoc {
	t.Helper()
	var d junitDoc
	dec := xml.NewDecoder(strings.NewReader(out))
	dec.Strict = true
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("not JUnit XML: %v\n%s", err, out)
	}
	if len(d.Suites) != 1 {
		t.Fatalf("%d suites", len(d.Suites))
	}
	s := d.Suites[0]
	failures, skipped, errs := 0, 0, 0
	for _, c := range s.Cases {
		if c.Failure != nil {
			failures++
		}
		if c.Skipped != nil {
			skipped++
		}
		if c.Error != nil {
			errs++
		}
	}
	if s.Tests != len(s.Cases) || s.Failures != failures || s.Skipped != skipped || s.Errors != errs ||
		d.Tests != s.Tests || d.Failures != failures || d.Skipped != skipped || d.Errors != errs {
		t.Errorf("counts: suites %d/%d/%d/%d, suite %d/%d/%d/%d, test cases %d, failures %d, skipped %d, errors %d",
			d.Tests, d.Failures, d.Skipped, d.Errors, s.Tests, s.Failures, s.Skipped, s.Errors, len(s.Cases), failures, skipped, errs)
	}
	return d
}

// TestJUnit: one test case per rule, API and caller: failed when it blocks, skipped when it
// does not; a hostile user agent and user name are escaped by the encoder and read back
// exactly; the counts add up; no findings is one passing test case.
func TestJUnit(t *testing.T) {
	lines := []string{hostileEvent("h1"), hostileEvent("h2"), removedEv, deprecatedEv, cleanEv}
	f := write(t, "audit.log", strings.Join(lines, "\n")+"\n")
	code, out, errOut := run(t, "", "--format", "junit", "--target-version", "1.25", f)
	if code != ExitRemoved {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.HasPrefix(out, "<?xml") || !strings.Contains(errOut, "classify scan: 5 events in 1 input, 4 findings") {
		t.Errorf("stdout must be the report only, the summary on stderr:\n%s\n%s", out, errOut)
	}
	for _, raw := range []string{hostile, "]]>", "<script>", `"q"`} {
		if strings.Contains(out, raw) {
			t.Errorf("%q written unescaped:\n%s", raw, out)
		}
	}
	d := parseJUnit(t, out)
	s := d.Suites[0]
	if s.Name != "classify scan" || s.Tests != 3 || s.Failures != 2 || s.Skipped != 1 {
		t.Fatalf("suite %s: %d tests, %d failures, %d skipped, want 3, 2, 1:\n%s", s.Name, s.Tests, s.Failures, s.Skipped, out)
	}
	c := s.Cases[0]
	if c.Classname != "removed-api" || c.Name != "policy/v1beta1 poddisruptionbudgets by u"+hostile+" ("+hostile+")" ||
		c.Failure == nil || !strings.Contains(c.Failure.Text, hostile) || !strings.Contains(c.Failure.Text, "2 matching requests") ||
		c.File != f || c.Line != 1 || !strings.Contains(c.Failure.Message, "blocks an upgrade to 1.25") {
		t.Errorf("hostile caller's test case: %+v", c)
	}
	if c := s.Cases[1]; c.Name != "policy/v1beta1 poddisruptionbudgets by ci-bot (helm/v3.8.0)" || c.Failure == nil || c.Line != 3 {
		t.Errorf("ci-bot: %+v", c)
	}
	if c := s.Cases[2]; c.Classname != "deprecated-api" || c.Skipped == nil || c.Failure != nil || !strings.Contains(c.Skipped.Text, "old-proxy") {
		t.Errorf("deprecation: %+v", c)
	}
	// After the removal's release is not targeted: nothing fails.
	code, out, _ = run(t, "", "--format", "junit", "--target-version", "1.24", f)
	if d := parseJUnit(t, out); code != ExitFindings || d.Failures != 0 || d.Skipped != 3 {
		t.Errorf("target 1.24: exit %d, %d failures, %d skipped", code, d.Failures, d.Skipped)
	}
	// No findings: one passing test case.
	code, out, _ = run(t, "", "--format", "junit", write(t, "clean.log", cleanEv+"\n"))
	if d := parseJUnit(t, out); code != ExitClean || d.Tests != 1 || d.Failures+d.Skipped+d.Errors != 0 || d.Suites[0].Cases[0].Name != "no findings" {
		t.Errorf("clean: exit %d\n%s", code, out)
	}
	// An input that cannot be read is an error test case, and exit 1.
	code, out, _ = run(t, "", "--format", "junit", "/no/such/audit.log")
	if d := parseJUnit(t, out); code != ExitError || d.Errors != 1 {
		t.Errorf("missing input: exit %d\n%s", code, out)
	}
}
