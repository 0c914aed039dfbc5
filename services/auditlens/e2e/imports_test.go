package e2e

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const modulePath = "github.com/auditlens/auditlens/"

// allowed lists, per package, the packages of its own service it may import (docs/architecture.md).
// Packages not listed are held to the rules for every package only.
var allowed = map[string][]string{
	"services/ingest/tail":       {},
	"services/ingest/checkpoint": {"services/ingest/tail"},
	"services/ingest/metrics":    {},
	"services/ingest/input":      {"services/ingest/metrics"},
	"services/ingest/backlog":    {},
	"services/ingest/file":       {"services/ingest/tail", "services/ingest/checkpoint", "services/ingest/input", "services/ingest/metrics"},
	"services/ingest/webhook":    {"services/ingest/input"},
	"services/ingest/firehose":   {"services/ingest/input"},
	"services/ingest/pubsub":     {"services/ingest/input"},
	"services/ingest/kafka":      {"services/ingest/input"},
	"services/ingest/cloudwatch": {"services/ingest/checkpoint", "services/ingest/input"},

	"services/classify/rules":     {},
	"services/classify/dedup":     {},
	"services/classify/scan":      {"services/classify/rules", "services/classify/dedup"},
	"services/classify/manifests": {"services/classify/rules", "services/classify/scan"},
	"services/classify/checklist": {"services/classify/rules", "services/classify/scan"},

	"services/report/store":            {"services/report/rollup"},
	"services/report/writer":           {"services/report/store"},
	"services/report/chdb":             {"services/report/store"},
	"services/report/engine":           {"services/report/store", "services/report/chdb"},
	"services/report/migrate":          {"services/report/engine", "services/report/store"},
	"services/report/rollup":           {},
	"services/report/weekly":           {"services/report/console", "services/report/rollup"},
	"services/report/console":          {"services/report/rollup"},
	"services/report/access":           {},
	"services/report/page":             {"services/report/access", "services/report/console", "services/report/weekly", "services/report/weekly/render"},
	"services/report/yamlfile":         {},
	"services/report/kubeclient":       {},
	"services/report/acks":             {"services/report/weekly", "services/report/yamlfile"},
	"services/report/owners":           {"services/report/weekly", "services/report/weekly/schedule", "services/report/yamlfile"},
	"services/report/readiness":        {"services/report/access", "services/report/console", "services/report/weekly"},
	"services/report/readiness/status": {"services/report/readiness", "services/report/weekly"},
}

// TestImportRules checks every package of every module (what it builds from, not its tests,
// which may use test helpers such as report/chtest) against the rules of
// docs/architecture.md: lib imports no service, services do not import each other (the
// all-in-one imports their root packages), nothing imports a command, nothing inside a
// service imports its root package, and the packages listed in allowed import no more of
// their service than the list says.
func TestImportRules(t *testing.T) {
	imports := map[string][]string{}
	seen := map[string]bool{}
	for _, mod := range []string{"lib", "proto", "services/ingest", "services/classify", "services/report", "services/auditlens"} {
		cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")
		cmd.Dir = filepath.Join("..", "..", "..", mod)
		cmd.Env = append(cmd.Environ(), "GOWORK=off")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list in %s: %v", mod, err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line)
			pkg := strings.TrimPrefix(f[0], modulePath)
			seen[pkg] = true
			for _, imp := range f[1:] {
				if strings.HasPrefix(imp, modulePath) && !slices.Contains(imports[pkg], strings.TrimPrefix(imp, modulePath)) {
					imports[pkg] = append(imports[pkg], strings.TrimPrefix(imp, modulePath))
				}
			}
		}
	}
	if len(seen) < 60 {
		t.Fatalf("only %d packages: go list found too little", len(seen))
	}
	roots := []string{"services/ingest", "services/classify", "services/report"}
	for pkg, imps := range imports {
		own := service(pkg)
		for _, imp := range imps {
			switch {
			case strings.HasPrefix(pkg, "lib/") && strings.HasPrefix(imp, "services/"):
				t.Errorf("%s imports %s: lib imports no service", pkg, imp)
			case strings.HasPrefix(pkg, "proto/") && !strings.HasPrefix(imp, "proto/"):
				t.Errorf("%s imports %s: proto imports nothing of ours", pkg, imp)
			case strings.Contains(imp, "/cmd/"):
				t.Errorf("%s imports the command %s", pkg, imp)
			case strings.HasPrefix(imp, "services/") && service(imp) != own:
				if own != "services/auditlens" || !slices.Contains(roots, imp) {
					t.Errorf("%s imports %s: services do not import each other (only the all-in-one, their root packages)", pkg, imp)
				}
			case imp == own && !strings.HasPrefix(pkg, own+"/cmd/"):
				t.Errorf("%s imports its service's root package %s: only the command wires it", pkg, imp)
			}
			if list, ok := allowed[pkg]; ok && service(imp) == own && imp != pkg && !slices.Contains(list, imp) {
				t.Errorf("%s imports %s: docs/architecture.md allows it only %v", pkg, imp, list)
			}
		}
	}
	for pkg := range allowed {
		if !seen[pkg] {
			t.Errorf("the rule for %s names no package", pkg)
		}
	}
}

// service is the module directory of pkg: "services/ingest" for "services/ingest/file/x".
func service(pkg string) string {
	parts := strings.SplitN(pkg, "/", 3)
	if parts[0] == "services" && len(parts) >= 2 {
		return parts[0] + "/" + parts[1]
	}
	return parts[0]
}
