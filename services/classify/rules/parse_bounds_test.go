package rules

import (
	"strings"
	"testing"
)

// A --rules-file is bounded as manifests are (review 3 E2): brackets or millions of items are
// refused, naming the file, before the parser holds them.
func TestRulesFileBounds(t *testing.T) {
	for name, c := range map[string]struct{ data, want string }{
		"200 KB of [":       {strings.Repeat("[", 200<<10), "rules.yaml: nested too deeply"},
		"a 3 MiB flat list": {"rules:\n" + strings.Repeat("- a\n", 3<<18), "rules.yaml: too large: more than 1048576 tokens"},
	} {
		if _, err := LoadSources(Source{Name: "rules.yaml", Data: []byte(c.data)}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}
