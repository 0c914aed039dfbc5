package classify

import (
	"github.com/auditlens/auditlens/lib/kubeversion"
	"github.com/auditlens/auditlens/services/classify/rules"
)

// Releases are the Kubernetes releases the catalogue of c (the embedded one and
// c.RulesFiles) judges upgrades against (rules.Catalogue.Releases): what the report's console
// offers as target versions in the all-in-one.
func (c Config) Releases() ([]kubeversion.Version, error) {
	cat, err := rules.Load(c.RulesFiles...)
	if err != nil {
		return nil, err
	}
	return cat.Releases(), nil
}
