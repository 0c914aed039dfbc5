package checklist

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// TestCatalogue132To137: the releases 1.33 to 1.37 remove, among others, the examples of
// issue 10, and nothing removed in 1.32 or 1.38 is listed as removed.
func TestCatalogue132To137(t *testing.T) {
	out, errOut, code := run(t, "--from", "1.32", "--to", "1.37", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	removed := map[string]Entry{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e Entry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if e.Change == "removed" {
			if e.Release < "1.33" || e.Release > "1.37" {
				t.Errorf("removed in %s listed for 1.32 -> 1.37: %+v", e.Release, e)
			}
			removed[e.API()] = e
		}
	}
	for api, rel := range map[string]string{
		"admissionregistration.k8s.io/v1beta1 validatingadmissionpolicies": "1.34",
		"storage.k8s.io/v1beta1 volumeattributesclasses":                   "1.37",
		"networking.k8s.io/v1beta1 ipaddresses":                            "1.37",
	} {
		if removed[api].Release != rel || removed[api].Replacement == "" {
			t.Errorf("%s: %+v, want removed in %s with a replacement", api, removed[api], rel)
		}
	}
	if _, ok := removed["flowcontrol.apiserver.k8s.io/v1beta3 flowschemas"]; ok {
		t.Error("a 1.32 removal is listed for an upgrade from 1.32")
	}
}

func TestCatalogueFormats(t *testing.T) {
	t.Setenv("COLUMNS", "200")
	out, _, code := run(t, "--from", "1.24", "--to", "1.25")
	if code != 0 || !strings.Contains(out, "CHANGE") || !strings.Contains(out, "policy/v1beta1 podsecuritypolicies") ||
		!strings.Contains(out, "psp") || !strings.Contains(out, "Pod Security Admission") {
		t.Errorf("table (exit %d):\n%s", code, out)
	}
	out, _, code = run(t, "--from", "1.24", "--to", "1.25", "--format", "markdown")
	if code != 0 || !strings.Contains(out, "# Upgrade checklist: Kubernetes 1.24 to 1.25") ||
		!strings.Contains(out, "| 1.25 | `batch/v1beta1 cronjobs` | CronJob | 1.25 | batch/v1 |") {
		t.Errorf("markdown (exit %d):\n%s", code, out)
	}
}

func TestCatalogueFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--to is required"},
		{[]string{"--to", "v1.x"}, `--to "v1.x": want MAJOR.MINOR`},
		{[]string{"--from", "1.37", "--to", "1.32"}, "--from 1.37 is not before --to 1.32"},
		{[]string{"--to", "1.30", "--format", "yaml"}, `--format "yaml"`},
		{[]string{"--to", "1.30", "--rules-file", "/no/such.yaml"}, "--rules-file"},
	} {
		_, errOut, code := run(t, tc.args...)
		if code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, %q, want %q", tc.args, code, errOut, tc.want)
		}
	}
}

func TestTerminalAndMarkdownEscaping(t *testing.T) {
	if got := md("a\x1b[31mred"); got != `a\x1b[31mred` {
		t.Errorf("term: %q", got)
	}
	if got := md("a|b<script>"); got != `a\|b&lt;script&gt;` {
		t.Errorf("md: %q", got)
	}
}

// TestTableFits: at COLUMNS=80 every line of the whole catalogue fits, and nothing is cut.
func TestTableFits(t *testing.T) {
	t.Setenv("COLUMNS", "80")
	out, errOut, code := run(t, "--to", "1.43")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, line := range strings.Split(out, "\n") {
		if n := len([]rune(line)); n > 80 {
			t.Fatalf("a line of %d columns: %q", n, line)
		}
	}
	if strings.Contains(out, "…") || !strings.Contains(out, "RELEASE  CHANGE") || !strings.Contains(out, "deprecated,") {
		t.Errorf("table:\n%s", out)
	}
}

// TestIntroducedForARollback: the API versions first served in a release of the range are
// listed as introduced (rule rollback-api) after what is removed and deprecated; one the
// release before already served is not, nor one older than the releases the rule follows.
func TestIntroducedForARollback(t *testing.T) {
	out, errOut, code := run(t, "--from", "1.36", "--to", "1.37", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	introduced := map[string]Entry{}
	last := ""
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e Entry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if e.Change == "introduced" {
			introduced[e.API()] = e
		} else if last == "introduced" && e.Change != "checked" {
			t.Errorf("%s after the introduced entries", e.Change)
		}
		last = e.Change
	}
	e, ok := introduced["certificates.k8s.io/v1 clustertrustbundles"]
	if !ok || e.Release != "1.37" || e.Rule != "rollback-api" || !strings.Contains(e.Note, "a rollback below 1.37") {
		t.Errorf("certificates.k8s.io/v1 clustertrustbundles: %+v (found %v)", e, ok)
	}
	for _, not := range []string{"certificates.k8s.io/v1beta1 clustertrustbundles", "resource.k8s.io/v1 deviceclasses", "apps/v1 deployments"} {
		if _, ok := introduced[not]; ok {
			t.Errorf("%s listed as introduced in 1.37", not)
		}
	}
	md, _, _ := run(t, "--from", "1.36", "--to", "1.37", "--format", "markdown")
	if !strings.Contains(md, "## Introduced (a rollback below the release does not serve it)") ||
		!strings.Contains(md, "| 1.37 | `certificates.k8s.io/v1 clustertrustbundles` | ClusterTrustBundle | - |") {
		t.Errorf("markdown:\n%s", md)
	}
}
