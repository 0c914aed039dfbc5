package scan

import (
	"encoding/json"
	"strings"
	"testing"
)

// ev is an audit event of the shape kube-apiserver 1.37 writes at Metadata level.
func ev(id, user, agent, uri, group, version, resource string, code int) string {
	b, _ := json.Marshal(map[string]any{
		"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata", "auditID": id, "stage": "ResponseComplete",
		"requestURI": uri, "verb": "list", "user": map[string]any{"username": user}, "userAgent": agent,
		"objectRef":      map[string]any{"resource": resource, "apiGroup": group, "apiVersion": version},
		"responseStatus": map[string]any{"code": code}, "requestReceivedTimestamp": "2026-11-29T10:00:00.000000Z",
		"stageTimestamp": "2026-11-29T10:00:00.000100Z",
	})
	return string(b)
}

// upgradeLog is a 1.37 cluster (its apiserver's own agent says so): a caller of an API 1.38
// removes (served, 200), and callers of APIs removed in 1.22 and 1.25 (answered 404).
var upgradeLog = strings.Join([]string{
	ev("cp", "system:apiserver", "kube-apiserver/v1.37.2 (linux/amd64) kubernetes/abc", "/api/v1/namespaces", "", "v1", "namespaces", 200),
	ev("dra", "dra-driver", "dra-driver/v0.4.0", "/apis/resource.k8s.io/v1beta1/deviceclasses", "resource.k8s.io", "v1beta1", "deviceclasses", 200),
	ev("ing1", "old-ci", "kubectl/v1.18.0 (linux/amd64) kubernetes/abc", "/apis/extensions/v1beta1/ingresses", "extensions", "v1beta1", "ingresses", 404),
	ev("ing2", "old-ci", "kubectl/v1.18.0 (linux/amd64) kubernetes/abc", "/apis/extensions/v1beta1/ingresses", "extensions", "v1beta1", "ingresses", 404),
	ev("pdb", "backup", "velero/v1.5.0", "/apis/policy/v1beta1/poddisruptionbudgets", "policy", "v1beta1", "poddisruptionbudgets", 404),
}, "\n") + "\n"

// The blockers split into what the upgrade breaks (removed by the target) and what fails
// already (removed at or before the cluster's release), counted apart, the new ones first;
// with no flag the cluster's release is read from its apiserver's agent and the target is
// the release after it.
func TestFailingNowApartFromTheUpgrade(t *testing.T) {
	f := write(t, "audit.log", upgradeLog)
	for _, parallel := range []string{"1", "3"} {
		code, out, errOut := run(t, "", "--format", "wide", "--parallel", parallel, f)
		if code != ExitRemoved {
			t.Fatalf("exit %d, want %d: %s", code, ExitRemoved, errOut)
		}
		for _, want := range []string{
			"4 blocking an upgrade from 1.37 to 1.38 (1 new in 1.38, 3 failing now)",
			"the cluster's release: 1.37 (the kube-apiserver user agent of 2026-11-29T10:00:00Z); target: 1.38 (the release after 1.37, the cluster's)",
			"Breaks on the upgrade to 1.38 (removed after 1.37, the cluster's release, at or before 1.38): 1 blocker, 1 finding\n" +
				"  resource.k8s.io/v1beta1 deviceclasses (removed-api): 1 finding by 1 caller, deprecated in 1.35, removed in 1.38, use resource.k8s.io/v1\n",
			"Failing now (removed at or before 1.37, the cluster's release: these callers fail today, a removed API with 404): 2 blockers, 3 findings\n" +
				"  extensions/v1beta1 ingresses (removed-api): 2 findings by 1 caller",
			"answered 404",
			"[failing now: removed at or before 1.37]",
			"[breaks on 1.38]",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("--parallel %s: summary lacks %q:\n%s", parallel, want, out)
			}
		}
		// The new blocker is listed before those failing already.
		if i, j := strings.Index(out, "Breaks on the upgrade"), strings.Index(out, "Failing now ("); i < 0 || j < i {
			t.Errorf("--parallel %s: the upgrade's blockers are not first:\n%s", parallel, out)
		}
	}

	// --current-version overrides the log; the target follows it.
	// (1.37 does not remove resource.k8s.io/v1beta1: only what fails already blocks 1.37.)
	_, out, _ := run(t, "", "--format", "wide", "--current-version", "1.36", f)
	if !strings.Contains(out, "3 blocking an upgrade from 1.36 to 1.37 (0 new in 1.37, 3 failing now)") {
		t.Errorf("--current-version 1.36:\n%s", out)
	}
	if !strings.Contains(out, "the cluster's release: 1.36 (--current-version); target: 1.37 (the release after 1.36, the cluster's)") {
		t.Errorf("--current-version 1.36: where the releases came from:\n%s", out)
	}

	// Skipping releases: what each hop removes.
	_, out, _ = run(t, "", "--format", "wide", "--current-version", "1.35", "--target-version", "1.38", f)
	if !strings.Contains(out, "    hop to 1.36 removes nothing in use\n    hop to 1.37 removes nothing in use\n    hop to 1.38 removes 1 blocker, 1 finding\n") {
		t.Errorf("1.35 to 1.38: the hops:\n%s", out)
	}

	// A target at or before a given current release is no upgrade.
	if code, _, errOut := run(t, "", "--current-version", "1.37", "--target-version", "1.36", f); code != ExitError ||
		!strings.Contains(errOut, "--target-version 1.36 is not after --current-version 1.37") {
		t.Errorf("target before current: exit %d: %s", code, errOut)
	}
	if code, _, errOut := run(t, "", "--current-version", "1.x", f); code != ExitError || !strings.Contains(errOut, "--current-version \"1.x\"") {
		t.Errorf("bad --current-version: exit %d: %s", code, errOut)
	}
}

// Without a control-plane agent (or with one sent by someone else) the cluster's release is
// unknown: every blocker is one list, and the target is the newest release the catalogue
// judges, not "any removal" (an API that 1.39 removes does not block by default).
func TestUnknownReleaseOneList(t *testing.T) {
	forged := strings.Replace(upgradeLog, `"username":"system:apiserver"`, `"username":"mallory"`, 1)
	forged += ev("lc", "app", "app/1.0", "/apis/coordination.k8s.io/v1beta1/leasecandidates", "coordination.k8s.io", "v1beta1", "leasecandidates", 200) + "\n"
	f := write(t, "audit.log", forged)
	code, out, errOut := run(t, "", "--format", "markdown", f)
	if code != ExitRemoved {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"6 findings, 4 blocking an upgrade to 1.38", // and old-ci's kubectl 1.18: a finding, not a blocker
		"the cluster's release: unknown (no control-plane user agent in the input; --current-version gives it); target: 1.38 (the newest release the catalogue judges (the cluster's release is unknown))",
		"**Blocks the upgrade to 1.38 (removed at or before it; the cluster's release is unknown: --current-version tells what fails already from what the upgrade breaks)**: 3 blockers, 4 findings",
		"`1.39`", // leasecandidates: a finding, not a blocker
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Failing now") || strings.Contains(out, "`1.39` **") || !strings.Contains(out, "`1.25` **blocks 1.38**") {
		t.Errorf("a failing-now list or a 1.39 removal blocking without a known release:\n%s", out)
	}
}

// The CI formats mark what fails already: a SARIF property and the message.
func TestSARIFFailingNow(t *testing.T) {
	f := write(t, "audit.log", upgradeLog)
	code, out, errOut := run(t, "", "--format", "sarif", f)
	if code != ExitRemoved {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var log struct {
		Runs []struct {
			Results []struct {
				RuleID     string `json:"ruleId"`
				Level      string `json:"level"`
				Message    struct{ Text string }
				Properties map[string]any `json:"properties"`
			} `json:"results"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(out), &log); err != nil {
		t.Fatal(err)
	}
	failing := map[string]bool{}
	for _, r := range log.Runs[0].Results {
		if r.RuleID == "kubectl-version-skew" {
			continue // old-ci's kubectl 1.18: a note, neither failing nor new
		}
		api, _ := r.Properties["api"].(string)
		now, _ := r.Properties["failingNow"].(bool)
		failing[api] = now
		if now != strings.Contains(r.Message.Text, "Failing now: removed at or before 1.37") || r.Level != "error" {
			t.Errorf("%s: level %s, message %q, failingNow %v", api, r.Level, r.Message.Text, now)
		}
	}
	want := map[string]bool{"resource.k8s.io/v1beta1 deviceclasses": false, "extensions/v1beta1 ingresses": true, "policy/v1beta1 poddisruptionbudgets": true}
	for api, now := range want {
		if got, ok := failing[api]; !ok || got != now {
			t.Errorf("%s: failingNow %v (listed %v), want %v", api, got, ok, now)
		}
	}
}

// rollbackLog is a 1.37 cluster whose trust tool writes ClusterTrustBundles through
// certificates.k8s.io/v1 (introduced in 1.37) and whose DRA driver reads resource.k8s.io/v1
// (1.34); the controller manager's own use of the new version goes back with it.
var rollbackLog = strings.Join([]string{
	ev("cp", "system:apiserver", "kube-apiserver/v1.37.2 (linux/amd64) kubernetes/abc", "/api/v1/namespaces", "", "v1", "namespaces", 200),
	ev("ctb1", "system:serviceaccount:cert-manager:trust-manager", "trust-manager/v0.12.0", "/apis/certificates.k8s.io/v1/clustertrustbundles", "certificates.k8s.io", "v1", "clustertrustbundles", 200),
	ev("ctb2", "system:serviceaccount:cert-manager:trust-manager", "trust-manager/v0.12.0", "/apis/certificates.k8s.io/v1/clustertrustbundles", "certificates.k8s.io", "v1", "clustertrustbundles", 200),
	ev("kcm", "system:kube-controller-manager", "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/abc/system:kube-controller-manager", "/apis/certificates.k8s.io/v1/clustertrustbundles", "certificates.k8s.io", "v1", "clustertrustbundles", 200),
	ev("dra", "dra-driver", "dra-driver/v0.5.0", "/apis/resource.k8s.io/v1/deviceclasses", "resource.k8s.io", "v1", "deviceclasses", 200),
}, "\n") + "\n"

// A rollback to the release before the cluster's breaks the callers of what the cluster's
// release introduced (the trust tool: one finding a day), not those of older APIs (the DRA
// driver's resource.k8s.io/v1 is from 1.34) nor the control plane; with the release unknown
// the section is left out, and a cluster whose release introduced nothing in use says so.
func TestRollbackReadiness(t *testing.T) {
	f := write(t, "audit.log", rollbackLog)
	code, out, errOut := run(t, "", "--format", "wide", f)
	if code != ExitFindings { // information: a rollback blocks no upgrade
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := "A rollback to 1.36 breaks what uses the APIs 1.37 introduced (rollback-api): 1 API\n" +
		"  certificates.k8s.io/v1 clustertrustbundles: 1 caller (system:serviceaccount:cert-manager:trust-manager  trust-manager/v0.12.0)"
	if !strings.Contains(out, want) || strings.Contains(out, "deviceclasses: 1 caller") {
		t.Errorf("summary lacks %q (or names the 1.34 API):\n%s", want, out)
	}
	if n := strings.Count(out, "rollback-api"); n < 2 { // the section and the finding's row
		t.Errorf("rollback-api %d times:\n%s", n, out)
	}
	_, md, _ := run(t, "", "--format", "markdown", f)
	if !strings.Contains(md, "**A rollback to `1.36`** breaks what uses the APIs `1.37` introduced: 1 API") {
		t.Errorf("markdown:\n%s", md)
	}
	_, out, _ = run(t, "", "--format", "wide", "--current-version", "1.38", "--target-version", "1.39", f)
	if !strings.Contains(out, "A rollback to 1.37: nothing seen uses what 1.38 introduced.") {
		t.Errorf("--current-version 1.38:\n%s", out)
	}
	var others []string
	for _, l := range strings.Split(rollbackLog, "\n") {
		if !strings.Contains(l, "kube-") {
			others = append(others, l)
		}
	}
	noRelease := write(t, "no-release.log", strings.Join(others, "\n"))
	if _, out, _ = run(t, "", "--format", "wide", noRelease); strings.Contains(out, "A rollback to") {
		t.Errorf("the release unknown, yet a rollback section:\n%s", out)
	}
}
