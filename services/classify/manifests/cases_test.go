package manifests

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"testing"

	"github.com/goccy/go-yaml"

	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/classify/rules"
	"github.com/auditlens/auditlens/services/classify/scan"
)

type manifestCase struct {
	Name     string                       `yaml:"name"`
	Manifest string                       `yaml:"manifest"`
	Must     []string                     `yaml:"must"`
	MustNot  []string                     `yaml:"must_not"`
	Expect   map[string]map[string]string `yaml:"expect"`
}

// TestManifestCases runs testdata/cases.yaml: rule cases for the manifests input, as data.
func TestManifestCases(t *testing.T) {
	b, err := os.ReadFile("testdata/cases.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []manifestCase `yaml:"cases"`
	}
	if err := yaml.UnmarshalWithOptions(b, &file, yaml.Strict()); err != nil {
		t.Fatal(err)
	}
	cat, err := rules.Load()
	if err != nil {
		t.Fatal(err)
	}
	c := &Checker{Engine: rules.NewEngine(cat)}
	for _, tc := range file.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			got := map[string]map[string]string{}
			if _, err := c.Check("case.yaml", []byte(tc.Manifest), func(source string, f *auditlensv1.Finding) {
				jb, _ := json.Marshal(Finding{JSONFinding: scan.ToJSON(f), Source: source})
				var m map[string]any
				_ = json.Unmarshal(jb, &m)
				fields := map[string]string{}
				for k, v := range m {
					fields[k] = fmt.Sprint(v)
				}
				got[f.RuleId] = fields
			}); err != nil {
				t.Fatal(err)
			}
			for _, id := range tc.Must {
				if got[id] == nil {
					t.Errorf("rule %s did not fire; fired: %v", id, slices.Sorted(maps.Keys(got)))
				}
			}
			for _, id := range tc.MustNot {
				if got[id] != nil {
					t.Errorf("rule %s fired: %s", id, got[id]["message"])
				}
			}
			for id, want := range tc.Expect {
				for k, v := range want {
					if got[id][k] != v {
						t.Errorf("rule %s: %s = %q, want %q", id, k, got[id][k], v)
					}
				}
			}
		})
	}
}
