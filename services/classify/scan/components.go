package scan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/auditlens/auditlens/lib/kubeversion"
)

// ComponentTargets are the releases of third-party components (cert-manager, istio, ...) an
// upgrade is judged against, by component name: the --target-versions flag,
// "cert-manager=1.6,istio=1.22". A finding on a component's CRD carries removed_in
// "<component> <release>".
type ComponentTargets map[string]kubeversion.Version

// String is the flag's value, by component name.
func (c ComponentTargets) String() string {
	names := make([]string, 0, len(c))
	for n := range c {
		names = append(names, n)
	}
	slices.Sort(names)
	for i, n := range names {
		names[i] = n + "=" + c[n].String()
	}
	return strings.Join(names, ",")
}

// Set reads "name=X.Y" pairs, comma-separated; it may be given several times.
func (c *ComponentTargets) Set(s string) error {
	if *c == nil {
		*c = ComponentTargets{}
	}
	for _, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		name, release, ok := strings.Cut(pair, "=")
		v, err := kubeversion.Parse(release)
		if !ok || name == "" || strings.ContainsAny(name, " \t") || err != nil {
			return fmt.Errorf("%q: want COMPONENT=X.Y, e.g. cert-manager=1.6", pair)
		}
		(*c)[strings.ToLower(name)] = v
	}
	return nil
}

// BlocksFor is Blocks for a finding's removed_in that may name a component's release
// ("cert-manager 1.6"): that is compared with the component's target, and blocks when no
// target is given for the component; a Kubernetes release is compared with target.
func BlocksFor(removedIn string, target kubeversion.Version, components ComponentTargets) bool {
	name, release, ok := strings.Cut(removedIn, " ")
	if !ok {
		return Blocks(removedIn, target)
	}
	removed, err := kubeversion.Parse(release)
	t, known := components[strings.ToLower(name)]
	return err != nil || !known || !t.Less(removed)
}
