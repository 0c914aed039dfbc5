package rules

import (
	"fmt"
	"slices"

	"github.com/auditlens/auditlens/lib/kubeversion"
)

// Targets are the Releases an upgrade can be planned to today: those up to the release after
// NewestRelease (the newest the catalogue's data was read from), all of them when it is unset.
// Later removals the data already schedules are findings' facts, not upgrade targets yet.
func (c *Catalogue) Targets() []kubeversion.Version {
	all := c.Releases()
	newest, err := kubeversion.Parse(c.NewestRelease)
	if c.NewestRelease == "" || err != nil {
		return all
	}
	last := newest.Next()
	return slices.DeleteFunc(all, func(v kubeversion.Version) bool { return last.Less(v) })
}

// Releases are the versions an upgrade can be judged against: every minor release from the
// first to the last the catalogue names as removing something (rules, APIs, body kinds,
// annotations, labels), oldest first; releases between removals are upgrade targets too.
func (c *Catalogue) Releases() []kubeversion.Version {
	var vs []kubeversion.Version
	add := func(s string) {
		if v, err := kubeversion.Parse(s); err == nil && s != "" {
			vs = append(vs, v)
		}
	}
	for _, r := range c.Rules {
		add(r.RemovedIn)
	}
	for _, a := range c.APIs {
		if a.Component == "" { // a component's releases are not Kubernetes releases
			add(a.RemovedIn)
		}
	}
	for _, b := range c.BodyKinds {
		add(b.RemovedIn)
	}
	for _, a := range append(slices.Clone(c.Annotations), c.ObjectAnnotations...) {
		add(a.RemovedIn)
	}
	for _, l := range c.Labels {
		add(l.RemovedIn)
	}
	if len(vs) == 0 {
		return nil
	}
	slices.SortFunc(vs, kubeversion.Compare)
	out := slices.Compact(vs)
	// Fill the minors between removals of one major.
	var all []kubeversion.Version
	for i, v := range out {
		all = append(all, v)
		if i+1 < len(out) && out[i+1].Major == v.Major {
			for w := v.Next(); w.Less(out[i+1]); w = w.Next() {
				all = append(all, w)
			}
		}
	}
	return all
}

// CheckTarget refuses a target version past the last of Releases, the last release the
// catalogue knows to remove something: it cannot say what a later release removes, so judging
// one would pass anything (--target-version 1.99 read as "ready"). The zero version (no
// target) is accepted.
func (c *Catalogue) CheckTarget(v kubeversion.Version) error {
	rs := c.Releases()
	if v == (kubeversion.Version{}) || len(rs) == 0 {
		return nil
	}
	if last := rs[len(rs)-1]; last.Less(v) {
		return fmt.Errorf("target version %s is past what this catalogue can judge: it is read from Kubernetes %s's data and knows removals up to %s; a newer auditlens knows later releases", v, c.NewestRelease, last)
	}
	return nil
}
