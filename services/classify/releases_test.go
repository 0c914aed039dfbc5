package classify

import (
	"slices"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/lib/kubeversion"
)

func TestConfigReleases(t *testing.T) {
	got, err := DefaultConfig().Releases()
	if err != nil || !slices.Contains(got, kubeversion.MustParse("1.22")) {
		t.Errorf("releases of the embedded catalogue: %v %v", got, err)
	}
	cfg := DefaultConfig()
	cfg.RulesFiles = []string{"/nonexistent/rules.yaml"}
	if _, err := cfg.Releases(); err == nil || !strings.Contains(err.Error(), "--rules-file") {
		t.Errorf("a missing rules file: %v, want an error naming --rules-file", err)
	}
}
