package kubetest

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/auditlens/auditlens/deploy/kubetest/kubeapiserver"
)

// gateStage is one entry of a feature gate's lifecycle in kube_features.go.
type gateStage struct {
	version    string // "1.33"
	def        bool
	preRelease string // Alpha, Beta, GA, Deprecated
}

// kubeFeatureGates reads the versioned lifecycle of every feature gate from
// pkg/features/kube_features.go of the Kubernetes release the tests build (the module is in Go's
// module cache after the build; go mod download fetches it from the proxy otherwise).
func kubeFeatureGates(t *testing.T) map[string][]gateStage {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", "k8s.io/kubernetes@"+kubeapiserver.Version)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	cmd.Dir = t.TempDir()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download k8s.io/kubernetes@%s: %v", kubeapiserver.Version, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download: %v %s", err, out)
	}
	file := filepath.Join(mod.Dir, "pkg", "features", "kube_features.go")
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	gates := map[string][]gateStage{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "defaultVersionedKubernetesFeatureGates" || len(vs.Values) != 1 {
			return true
		}
		lit, _ := vs.Values[0].(*ast.CompositeLit)
		if lit == nil {
			return false
		}
		for _, e := range lit.Elts {
			kv, _ := e.(*ast.KeyValueExpr)
			key, _ := kv.Key.(*ast.Ident)
			specs, _ := kv.Value.(*ast.CompositeLit)
			if key == nil || specs == nil {
				continue
			}
			for _, s := range specs.Elts {
				st, _ := s.(*ast.CompositeLit)
				if st == nil {
					continue
				}
				var g gateStage
				for _, fe := range st.Elts {
					fkv, _ := fe.(*ast.KeyValueExpr)
					name, _ := fkv.Key.(*ast.Ident)
					if name == nil {
						continue
					}
					switch name.Name {
					case "Version": // version.MustParse("1.33")
						if call, ok := fkv.Value.(*ast.CallExpr); ok && len(call.Args) == 1 {
							if bl, ok := call.Args[0].(*ast.BasicLit); ok {
								g.version, _ = strconv.Unquote(bl.Value)
							}
						}
					case "Default":
						if id, ok := fkv.Value.(*ast.Ident); ok {
							g.def = id.Name == "true"
						}
					case "PreRelease": // featuregate.Deprecated
						if sel, ok := fkv.Value.(*ast.SelectorExpr); ok {
							g.preRelease = sel.Sel.Name
						}
					}
				}
				gates[key.Name] = append(gates[key.Name], g)
			}
		}
		return false
	})
	if len(gates) < 100 {
		t.Fatalf("%s: %d feature gates read, the file's shape changed", file, len(gates))
	}
	return gates
}

// TestCatalogueFeatureGates: the releases of the catalogue's rules that follow a feature gate
// are upstream's, read from kube_features.go of the release the tests build: removed_in is the
// first release whose default breaks the old use (breaks_when), else deprecated_in the first
// that marks the gate deprecated. A rule naming a gate that does not exist fails too.
func TestCatalogueFeatureGates(t *testing.T) {
	gates := kubeFeatureGates(t)
	raw, err := os.ReadFile("../../services/classify/rules/catalogue.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cat struct {
		Rules []struct {
			ID           string `json:"id"`
			DeprecatedIn string `json:"deprecated_in"`
			RemovedIn    string `json:"removed_in"`
			FeatureGate  *struct {
				Name       string `json:"name"`
				BreaksWhen *bool  `json:"breaks_when"`
			} `json:"feature_gate"`
		} `json:"rules"`
	}
	if err := yaml.Unmarshal(raw, &cat); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, r := range cat.Rules {
		if r.FeatureGate == nil {
			continue
		}
		stages, ok := gates[r.FeatureGate.Name]
		if !ok {
			t.Errorf("%s: no feature gate %s in Kubernetes %s", r.ID, r.FeatureGate.Name, kubeapiserver.Version)
			continue
		}
		first := func(match func(gateStage) bool) string {
			for _, s := range stages {
				if match(s) {
					return s.version
				}
			}
			return ""
		}
		if b := r.FeatureGate.BreaksWhen; b != nil {
			if want := first(func(s gateStage) bool { return s.def == *b }); r.RemovedIn != want {
				t.Errorf("%s: removed_in %q, but %s's default is first %v in %q (%+v)", r.ID, r.RemovedIn, r.FeatureGate.Name, *b, want, stages)
			}
		} else if want := first(func(s gateStage) bool { return s.preRelease == "Deprecated" }); r.DeprecatedIn != want {
			t.Errorf("%s: deprecated_in %q, but %s is deprecated from %q (%+v)", r.ID, r.DeprecatedIn, r.FeatureGate.Name, want, stages)
		}
		checked++
		t.Logf("%s follows %s: %+v", r.ID, r.FeatureGate.Name, stages)
	}
	if checked < 3 {
		t.Errorf("%d rules follow a feature gate, want at least 3 (gitRepo, strict IP/CIDR, Windows host network)", checked)
	}
}
