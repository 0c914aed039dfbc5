package manifests

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/services/classify/scan"
)

func run(t *testing.T, stdin string, args ...string) ([]Finding, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(args, strings.NewReader(stdin), &out, &errOut)
	var fs []Finding
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if line == "" {
			continue
		}
		var f Finding
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		fs = append(fs, f)
	}
	return fs, errOut.String(), code
}

func keys(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Source+" "+f.RuleID+" "+f.RemovedIn)
	}
	sort.Strings(out)
	return out
}

// TestDirectory walks a rendered chart (multi-document YAML, a .yml file, a file that is not
// a manifest) and a JSON List: each rule the issue names fires on the document that has it.
func TestDirectory(t *testing.T) {
	fs, errOut, code := run(t, "", "--target-version", "1.25", filepath.Join("testdata", "tree"))
	if code != 3 {
		t.Fatalf("exit %d, want 3; stderr %s", code, errOut)
	}
	old := filepath.Join("testdata", "tree", "chart", "templates", "old.yaml")
	list := filepath.Join("testdata", "tree", "list.json")
	want := []string{
		old + "#1 beta-node-label ",
		old + "#1 removed-api 1.16",
		old + "#1 seccomp-alpha-annotation 1.27",
		old + "#2 psp 1.25",
		old + "#3 service-topology-keys 1.22",
		list + "#1.items[0] removed-api 1.32",
		list + "#1.items[1] csr-key-encipherment-non-rsa ",
	}
	sort.Strings(want)
	if got := keys(fs); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("findings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, f := range fs {
		if f.AuditID != "" || f.Verb != "" || f.Username != "" || f.Stage != "" || f.EventTime != "" || f.RequestURI != "" {
			t.Errorf("audit fields not empty: %+v", f.JSONFinding)
		}
		if f.RuleID == "removed-api" && f.Source == old+"#1" {
			if f.Name != "web" || f.Namespace != "shop" || f.APIGroup != "extensions" || f.Resource != "deployments" || f.Replacement != "apps/v1" {
				t.Errorf("removed-api finding: %+v", f.JSONFinding)
			}
			if !strings.Contains(f.Message, old+"#1 declares extensions/v1beta1 deployments") || strings.Contains(f.Message, "user agent") {
				t.Errorf("message: %s", f.Message)
			}
			if len(f.Evidence) != 2 || f.Evidence[0] != (scan.JSONEvidence{Path: "apiVersion", Value: "extensions/v1beta1"}) ||
				f.Evidence[1] != (scan.JSONEvidence{Path: "kind", Value: "Deployment"}) {
				t.Errorf("evidence: %+v", f.Evidence)
			}
		}
		if f.RuleID == "psp" && (f.Message == "" || strings.Contains(f.Message, "request on") ||
			!strings.Contains(f.Message, "a manifest declares policy/v1beta1 PodSecurityPolicy restricted, in "+old+"#2") || len(f.Evidence) != 2 ||
			f.Evidence[0] != (scan.JSONEvidence{Path: "apiVersion", Value: "policy/v1beta1"}) || f.Evidence[1] != (scan.JSONEvidence{Path: "kind", Value: "PodSecurityPolicy"})) {
			t.Errorf("psp finding in manifest wording: %s %+v", f.Message, f.Evidence)
		}
		if f.RuleID == "seccomp-alpha-annotation" && (len(f.Evidence) != 1 ||
			f.Evidence[0].Path != `spec.template.metadata.annotations["seccomp.security.alpha.kubernetes.io/pod"]`) {
			t.Errorf("evidence: %+v", f.Evidence)
		}
	}
	if !strings.Contains(errOut, "6 documents in 3 files, 7 findings, 3 blocking an upgrade to 1.25") {
		t.Errorf("summary: %s", errOut)
	}
}

func TestStdinAndExitCodes(t *testing.T) {
	clean, err := os.ReadFile("testdata/tree/chart/templates/clean.yml")
	if err != nil {
		t.Fatal(err)
	}
	if fs, errOut, code := run(t, string(clean), "-"); code != 0 || len(fs) != 0 {
		t.Errorf("clean manifest: exit %d, %v, %s", code, fs, errOut)
	}
	beta := "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  nodeSelector: {failure-domain.beta.kubernetes.io/zone: a}\n"
	if fs, _, code := run(t, beta, "-"); code != 2 || len(fs) != 1 || fs[0].Source != "stdin#1" {
		t.Errorf("deprecation only: exit %d, %+v", code, fs)
	}
	later := "apiVersion: resource.k8s.io/v1beta2\nkind: ResourceClaim\nmetadata: {name: c}\n"
	if fs, _, code := run(t, later, "--target-version", "1.37", "-"); code != 2 || len(fs) != 1 || fs[0].RemovedIn != "1.39" {
		t.Errorf("removal after the target: exit %d, %+v", code, fs)
	}
	if _, _, code := run(t, later, "--target-version", "1.39", "-"); code != 3 {
		t.Errorf("removal at the target: exit %d", code)
	}
	if _, errOut, code := run(t, later, "--target-version", "1.99", "-"); code != 1 || !strings.Contains(errOut, "past what this catalogue can judge") {
		t.Errorf("a target past the catalogue: exit %d, %s", code, errOut)
	}
}

func TestBadInput(t *testing.T) {
	bad := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n- just\n- a list\n---\nfoo: bar\n---\napiVersion: batch/v1beta1\nkind: CronJob\nmetadata: {name: c}\n"
	fs, errOut, code := run(t, bad, "-")
	if code != 3 {
		t.Errorf("exit %d, want 3: the removed CronJob is reported despite the bad documents", code)
	}
	if !strings.Contains(errOut, "1 input not read in full") {
		t.Errorf("the summary does not count the failure: %s", errOut)
	}
	for _, want := range []string{"stdin: document 2: not a Kubernetes object", "document 3: not a Kubernetes object: no apiVersion or kind"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q: %s", want, errOut)
		}
	}
	if len(fs) != 1 || fs[0].Source != "stdin#4" || fs[0].RemovedIn != "1.25" {
		t.Errorf("the good documents are still checked: %+v", fs)
	}
	if _, errOut, code := run(t, "", "/no/such/dir"); code != 1 || !strings.Contains(errOut, "/no/such/dir") {
		t.Errorf("missing path: exit %d, %s", code, errOut)
	}
	if _, errOut, code := run(t, "a: [b\n", "-"); code != 1 || !strings.Contains(errOut, "document 1 (line 1): parse") {
		t.Errorf("syntax error: exit %d, %s", code, errOut)
	}
	if _, errOut, _ := run(t, "a: [b\n---\nc: {d\n", "-"); strings.Contains(errOut, `\n`) || strings.Count(errOut, "classify manifests: stdin: document") != 2 {
		t.Errorf("two errors, one line each, no literal \\n:\n%s", errOut)
	}
	if _, errOut, code := run(t, ""); code != 1 || !strings.Contains(errOut, "no input") {
		t.Errorf("no args: exit %d, %s", code, errOut)
	}
}

func TestTable(t *testing.T) {
	var out, errOut bytes.Buffer
	esc := "apiVersion: batch/v1beta1\nkind: CronJob\nmetadata: {name: \"c\\e[31m\"}\n"
	if code := Main([]string{"--format", "table", "-"}, strings.NewReader(esc), &out, &errOut); code != 3 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "SOURCE") || !strings.Contains(out.String(), "stdin#1") || strings.Contains(out.String(), "\x1b") {
		t.Errorf("table:\n%q", out.String())
	}
}

// --format markdown carries its summary on stdout: printed once, not again on stderr (both
// land on one terminal); the other formats keep it on stderr.
func TestMarkdownSummaryOnce(t *testing.T) {
	for format, wantStderr := range map[string]bool{"markdown": false, "table": true} {
		var out, errOut bytes.Buffer
		Main([]string{"--format", format, "testdata/tree"}, strings.NewReader(""), &out, &errOut)
		all := out.String() + errOut.String()
		if n := strings.Count(all, "6 documents in 3 files"); n != 1 {
			t.Errorf("--format %s: the summary %d times in stdout and stderr:\n%s", format, n, all)
		}
		if got := strings.Contains(errOut.String(), "6 documents in 3 files, 7 findings, 5 blocking an upgrade to 1.38; target 1.38: the newest release the catalogue judges"); got != wantStderr {
			t.Errorf("--format %s: summary on stderr %v, want %v: %q", format, got, wantStderr, errOut.String())
		}
	}
}

// With the cluster's release given, what it refuses today (removed at or before it) is
// counted apart from what the upgrade breaks; the target defaults to the release after it.
func TestCurrentVersionSplitsTheBlockers(t *testing.T) {
	in := "apiVersion: extensions/v1beta1\nkind: Ingress\nmetadata: {name: old, namespace: web}\n---\n" +
		"apiVersion: resource.k8s.io/v1beta1\nkind: DeviceClass\nmetadata: {name: gpu}\n---\n" +
		"apiVersion: coordination.k8s.io/v1beta1\nkind: LeaseCandidate\nmetadata: {name: later, namespace: kube-system}\n"
	var out, errOut bytes.Buffer
	if code := Main([]string{"--format", "sarif", "--current-version", "1.37", "-"}, strings.NewReader(in), &out, &errOut); code != 3 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	want := "3 documents in 1 file, 3 findings, 2 blocking an upgrade from 1.37 to 1.38 (1 new in 1.38, 1 failing now: removed at or before 1.37); " +
		"target 1.38: the release after 1.37, the cluster's"
	if !strings.Contains(errOut.String(), want) {
		t.Errorf("summary %q lacks %q", errOut.String(), want)
	}
	if n := strings.Count(out.String(), `"failingNow": true`); n != 1 {
		t.Errorf("%d SARIF results failing now, want 1 (the Ingress):\n%s", n, out.String())
	}
	if !strings.Contains(out.String(), "Failing now: removed at or before 1.37, the cluster's release (it refuses this manifest today).") {
		t.Errorf("the Ingress's message does not say it fails now:\n%s", out.String())
	}
	errOut.Reset()
	if code := Main([]string{"--current-version", "1.38", "--target-version", "1.38", "-"}, strings.NewReader(in), &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), "is not after --current-version 1.38") {
		t.Errorf("target not after current: exit %d: %s", code, errOut.String())
	}
}
