package rules

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
)

// rulesDoc is the page that lists every rule of the embedded catalogue by family, with its
// source and the audit level it needs; TestRulesDoc keeps it in step (-update rewrites it).
const rulesDoc = "../../../docs/rules.md"

var familyTitles = []struct{ id, title, about string }{
	{"api", "Removed and deprecated API versions", "Every request names the API it calls: Metadata level sees them all, reads included."},
	{"security", "Security features removed or changed", "PodSecurityPolicy, seccomp and AppArmor annotations, legacy tokens and client auth plugins, Pod Security."},
	{"version-skew", "Version skew", "The release of each kubelet, kube-proxy and kubectl, read from the user agent it sends, against the version-skew policy. " +
		"Reported once a day per caller and release (a sighting), not per request. The cluster's own release comes from the control plane's agents or --current-version."},
	{"node", "Nodes", "Node labels and taints, and the container runtime a kubelet registers with."},
	{"request-body", "Request bodies", "Fields and values that only a request body shows: the apiserver's warnings about them never reach the audit log."},
	{"drain", "Drains", "What stops a node drain, and so a node upgrade."},
	{"rollback", "Rollback readiness", "Who uses what a recent release introduced (the API versions of the newest four releases the catalogue reads): " +
		"a rollback to the release before takes it away. Reported once a day per caller and API (a sighting); Kubernetes' own components go back with the cluster and are left out."},
	{"webhook", "Webhooks and the kubelet API", "Admission webhooks that failed during a request, and clients of the kubelet API through nodes/proxy."},
}

func renderRulesDoc(c *Catalogue) []byte {
	var b bytes.Buffer
	cell := func(s string) string {
		if s == "" {
			return "-"
		}
		return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
	}
	b.WriteString("# Rules\n\n")
	b.WriteString("<!-- Generated from services/classify/rules/catalogue.yaml by TestRulesDoc: go test ./rules -run TestRulesDoc -update -->\n\n")
	b.WriteString("Every rule auditlens applies, by family, with where its facts come from and the audit level it needs\n" +
		"(`deploy/audit-policy.yaml` logs every request at Metadata and the bodies of the writes the Request-level rules read).\n" +
		"A finding blocks an upgrade when its `removed_in` is at or before the target release; a deprecation, and a check tied\n" +
		"to no release, never blocks. `classify catalogue --from X.Y --to X.Y` lists what applies to one upgrade.\n\n")
	for _, f := range familyTitles {
		fmt.Fprintf(&b, "## %s\n\n%s\n\n| rule | severity | deprecated | removed | audit level | replacement | source |\n|---|---|---|---|---|---|---|\n", f.title, f.about)
		for _, r := range c.Rules {
			if r.Family != f.id {
				continue
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s | %s |\n", r.ID, r.Severity, cell(r.DeprecatedIn), cell(r.RemovedIn), r.Level, cell(r.Replacement), cell(r.Source))
		}
		b.WriteString("\n")
		switch f.id {
		case "version-skew":
			b.WriteString("| component | user agent | believed from | may trail kube-apiserver by | may be newer by | source |\n|---|---|---|---|---|---|\n")
			for _, s := range c.VersionSkew {
				older := fmt.Sprint(s.Older)
				if s.OlderBefore != "" {
					older += fmt.Sprintf(" (%d before %s)", s.OlderThen, s.OlderBefore)
				}
				fmt.Fprintf(&b, "| %s | `%s...` | %s | %s | %d | %s |\n", s.Component, s.Agent, cell(strings.Join(s.Users, ", ")), older, s.Newer, cell(s.Source))
			}
			b.WriteString("\n")
		case "node":
			b.WriteString("| container runtime | unsupported from | replacement | source |\n|---|---|---|---|\n")
			for _, r := range c.Runtimes {
				fmt.Fprintf(&b, "| `%s*` | %s | %s | %s |\n", r.Prefix, r.RemovedIn, cell(r.Replacement), cell(r.Source))
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("## Not checked yet\n\n" +
		"Kubelets newer than the control plane are no finding (that needs the cluster's release when classifying): the console\n" +
		"warns of them beside the fleet's version spread. Not checked at all: kube-proxy's ipvs mode (its ConfigMap is not\n" +
		"logged at Request level), kubelet cgroup v1 warnings (Events),\n" +
		"non-canonical IPs and CIDRs (StrictIPCIDRValidation), Windows hostNetwork pods, and rollback readiness (APIs the\n" +
		"release before the target lacks).\n")
	return b.Bytes()
}

// TestRulesDoc: docs/rules.md is the catalogue's, and names every rule.
func TestRulesDoc(t *testing.T) {
	c := mustEngine(t).Catalogue()
	got := renderRulesDoc(c)
	for _, r := range c.Rules {
		if !bytes.Contains(got, []byte("| `"+r.ID+"` |")) {
			t.Errorf("rule %s (family %q) is in no family of the page", r.ID, r.Family)
		}
	}
	if *update {
		if err := os.WriteFile(rulesDoc, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(rulesDoc)
	if err != nil || !bytes.Equal(want, got) {
		t.Errorf("%s is not the catalogue's (%v): go test ./rules -run TestRulesDoc -update", rulesDoc, err)
	}
}
