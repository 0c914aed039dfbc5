package manifests

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/lib/printable"
)

// TestTemplateSkipped: a chart directory with an unrendered template and a removed CronJob
// still exits 3; the template is named with the command that renders it, and counted.
func TestTemplateSkipped(t *testing.T) {
	dir := t.TempDir()
	tmpl := "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ include \"web.fullname\" . }}\n  labels:\n    {{- include \"web.labels\" . | nindent 4 }}\nspec:\n  replicas: {{ .Values.replicas }}\n"
	cron := "apiVersion: batch/v1beta1\nkind: CronJob\nmetadata: {name: nightly}\n"
	for name, body := range map[string]string{"deployment.yaml": tmpl, "cronjob.yaml": cron} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fs, errOut, code := run(t, "", dir)
	if code != 3 || len(fs) != 1 || fs[0].RemovedIn != "1.25" {
		t.Errorf("exit %d, %+v, want 3 and the CronJob:\n%s", code, fs, errOut)
	}
	for _, want := range []string{filepath.Join(dir, "deployment.yaml") + ": a template", "helm template RELEASE CHART | classify manifests -", "1 template skipped"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	// A manifest holding {{ }} in its strings (an alerting rule) is a manifest.
	rule := "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata: {name: r}\nspec:\n  groups: [{name: g, rules: [{alert: Down, annotations: {summary: '{{ $labels.instance }} down'}}]}]\n"
	if _, errOut, code := run(t, rule, "-"); code != 0 || strings.Contains(errOut, "template") {
		t.Errorf("alerting rule: exit %d, %s", code, errOut)
	}
}

// TestTableFits: at COLUMNS=80 (and 60) no line of the table is wider, and nothing is cut:
// every value is there, wrapped.
func TestTableFits(t *testing.T) {
	for _, width := range []string{"80", "60"} {
		t.Setenv("COLUMNS", width)
		var out, errOut bytes.Buffer
		code := Main([]string{"--format", "table", filepath.Join("testdata", "tree")}, strings.NewReader(""), &out, &errOut)
		if code != 3 {
			t.Fatalf("exit %d: %s", code, errOut.String())
		}
		for _, line := range strings.Split(out.String(), "\n") {
			if n := len([]rune(line)); n > atoi(width) {
				t.Errorf("COLUMNS=%s: a line of %d columns:\n%s", width, n, out.String())
				break
			}
		}
		if n := strings.Count(out.String(), "critical ") + strings.Count(out.String(), "warning ") + strings.Count(out.String(), "info "); n != 7 ||
			strings.Contains(out.String(), "…") || !strings.HasPrefix(out.String(), "SOURCE") {
			t.Errorf("COLUMNS=%s: %d rows, want 7, nothing cut:\n%s", width, n, out.String())
		}
	}
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// TestMarkdown: a findings table and a summary; text from the manifest is a code span, never
// markup.
func TestMarkdown(t *testing.T) {
	var out, errOut bytes.Buffer
	in := "apiVersion: batch/v1beta1\nkind: CronJob\nmetadata: {name: \"<img src=x>|`a`\"}\n"
	if code := Main([]string{"--format", "markdown", "--target-version", "1.30", "-"}, strings.NewReader(in), &out, &errOut); code != 3 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	md := out.String()
	for _, want := range []string{"## Findings", "| Source | Severity | Rule |", "| `stdin#1` | critical | `removed-api` | `1.25` |",
		"`` <img src=x>\\|`a` ``", "## Summary", "1 document in 1 file, 1 finding, 1 blocking an upgrade to 1.30."} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, printable.String("\x1b")) {
		t.Errorf("escape in markdown: %s", md)
	}
}

// TestComponentTargets: a cert-manager.io/v1alpha2 Certificate gives a finding naming
// cert-manager and the release that stopped serving it; --target-versions decides whether it
// blocks, separately from the Kubernetes target.
func TestComponentTargets(t *testing.T) {
	cert := "apiVersion: cert-manager.io/v1alpha2\nkind: Certificate\nmetadata: {name: web, namespace: shop}\nspec: {secretName: web-tls}\n"
	fs, errOut, code := run(t, cert, "--target-version", "1.30", "-")
	if code != 3 || len(fs) != 1 {
		t.Fatalf("no component target: exit %d, %+v, %s", code, fs, errOut)
	}
	f := fs[0]
	if f.RuleID != "removed-api" || f.RemovedIn != "cert-manager 1.6" || f.Replacement != "cert-manager.io/v1" ||
		!strings.Contains(f.Message, "no longer served by the CRDs of cert-manager 1.6") {
		t.Errorf("finding: %+v", f.JSONFinding)
	}
	for _, tc := range []struct {
		targets string
		want    int
	}{{"cert-manager=1.5", 2}, {"cert-manager=1.6", 3}, {"istio=1.22,cert-manager=1.7", 3}, {"istio=1.22", 3}} {
		if _, errOut, code := run(t, cert, "--target-version", "1.30", "--target-versions", tc.targets, "-"); code != tc.want {
			t.Errorf("--target-versions %s: exit %d, want %d: %s", tc.targets, code, tc.want, errOut)
		}
	}
	if _, errOut, code := run(t, cert, "--target-versions", "cert-manager:1.6", "-"); code != 1 || !strings.Contains(errOut, "want COMPONENT=X.Y") {
		t.Errorf("bad flag: exit %d, %s", code, errOut)
	}
	istio := "apiVersion: rbac.istio.io/v1alpha1\nkind: ServiceRole\nmetadata: {name: viewer, namespace: shop}\n"
	if fs, _, code := run(t, istio, "--target-versions", "istio=1.5", "-"); code != 2 || len(fs) != 1 || fs[0].RemovedIn != "istio 1.6" {
		t.Errorf("istio before its removal: exit %d, %+v", code, fs)
	}
}
