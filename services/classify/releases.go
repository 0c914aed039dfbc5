package classify

import (
	"github.com/auditlens/auditlens/lib/kubeversion"
	"github.com/auditlens/auditlens/services/classify/rules"
)

// Releases are the Kubernetes releases the catalogue of c (the embedded one and
// c.RulesFiles) judges upgrades against today (rules.Catalogue.Targets): what the report's
// console offers as target versions in the all-in-one, the newest being its default.
func (c Config) Releases() ([]kubeversion.Version, error) {
	cat, err := rules.Load(c.RulesFiles...)
	if err != nil {
		return nil, err
	}
	return cat.Targets(), nil
}
