package main

import (
	"fmt"
	"os"
	"slices"

	"github.com/goccy/go-yaml"

	"github.com/auditlens/auditlens/lib/kubeversion"
)

// overlay is the hand-written part of the API catalogue: what the lifecycle data lacks, each
// line with its source (tools/catalogue/overlay.yaml).
type overlay struct {
	APIs         []overlayAPI         `yaml:"apis"`
	Replacements []overlayReplacement `yaml:"replacements"`
	Removals     []overlayRemoval     `yaml:"removals"`
}

// overlayRemoval is a release in which kube-apiserver stopped serving a tagged API earlier
// than its tag says (seen in kube-apiserver's own storage registration).
type overlayRemoval struct {
	Group     string              `yaml:"group"`
	Version   string              `yaml:"version"`
	Kind      string              `yaml:"kind"`
	RemovedIn kubeversion.Version `yaml:"removed_in"`
	Source    string              `yaml:"source"`
}

type overlayAPI struct {
	// NoReplacement says the API has none (Replacement empty on purpose).
	NoReplacement bool                `yaml:"no_replacement"`
	Group         string              `yaml:"group"`
	Version       string              `yaml:"version"`
	Resource      string              `yaml:"resource"`
	Kind          string              `yaml:"kind"`
	DeprecatedIn  kubeversion.Version `yaml:"deprecated_in"`
	RemovedIn     kubeversion.Version `yaml:"removed_in"`
	Replacement   string              `yaml:"replacement"`
	Note          string              `yaml:"note"`
	Source        string              `yaml:"source"`
}

type overlayReplacement struct {
	// NoReplacement says the API has none (Replacement empty on purpose).
	NoReplacement bool   `yaml:"no_replacement"`
	Group         string `yaml:"group"`
	Version       string `yaml:"version"`
	Kind          string `yaml:"kind"`
	Replacement   string `yaml:"replacement"`
	Source        string `yaml:"source"`
}

func readOverlay(path string) (*overlay, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read overlay: %w", err)
	}
	var o overlay
	if err := yaml.UnmarshalWithOptions(b, &o, yaml.Strict()); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i, a := range o.APIs {
		if a.Source == "" || a.Version == "" || a.Resource == "" || a.Kind == "" || (a.RemovedIn.IsZero() && a.DeprecatedIn.IsZero()) {
			return nil, fmt.Errorf("%s: apis[%d]: every line needs version, resource, kind, deprecated_in or removed_in, and its source", path, i)
		}
	}
	for i, r := range o.Removals {
		if r.Source == "" || r.Version == "" || r.Kind == "" || r.RemovedIn.IsZero() {
			return nil, fmt.Errorf("%s: removals[%d]: every line needs version, kind, removed_in and its source", path, i)
		}
	}
	for i, r := range o.Replacements {
		if r.Source == "" || r.Version == "" || r.Kind == "" || (r.Replacement == "") != r.NoReplacement {
			return nil, fmt.Errorf("%s: replacements[%d]: every line needs version, kind, replacement or no_replacement: true, and its source", path, i)
		}
	}
	return &o, nil
}

func (o *overlay) replacementOf(k gvk) *overlayReplacement {
	if o == nil {
		return nil
	}
	for i, r := range o.Replacements {
		if r.Group == k.Group && r.Version == k.Version && r.Kind == k.Kind {
			return &o.Replacements[i]
		}
	}
	return nil
}

// apply adds the overlay's rows. A row may only fill in what the data lacks: an API the data
// does not have, or one whose package has no lifecycle tags. When upstream data gains the
// row, the generator fails and says to drop the overlay line, so the two never disagree
// silently.
func (o *overlay) apply(c *catalogueData) error {
	if o == nil {
		return nil
	}
	for _, a := range o.APIs {
		row := Row{Group: a.Group, Version: a.Version, Resource: a.Resource, Kind: a.Kind, DeprecatedIn: a.DeprecatedIn,
			RemovedIn: a.RemovedIn, Replacement: a.Replacement, Note: a.Note, Source: "overlay: " + a.Source, fromOverlay: true,
			replacementKnown: a.Replacement != "" || a.NoReplacement}
		if a.NoReplacement {
			row.Source += "; replacement: none"
		}
		replaced := false
		for i := range c.APIs {
			g := &c.APIs[i]
			if g.Group != a.Group || g.Version != a.Version || g.Resource != a.Resource {
				continue
			}
			if g.tagged {
				return fmt.Errorf("overlay: %s %s: the lifecycle data now has this API (%s): drop the overlay line",
					gv(a.Group, a.Version), a.Resource, g.Source)
			}
			if !row.replacementKnown {
				row.Replacement, row.replacementKnown = g.Replacement, g.replacementKnown
			}
			row.Source += "; generated was: " + g.Source + " removed_in " + orNone(g.RemovedIn.String())
			c.APIs[i], replaced = row, true
		}
		if !replaced {
			c.APIs = append(c.APIs, row)
		}
		if !a.RemovedIn.IsZero() && !c.Newest.Less(a.RemovedIn) {
			// Not served any more, whatever the types still in the module say.
			c.Served = slices.DeleteFunc(c.Served, func(r Row) bool {
				return r.Group == a.Group && r.Version == a.Version && r.Resource == a.Resource
			})
		}
	}
	for _, r := range o.Removals {
		found := false
		for i := range c.APIs {
			g := &c.APIs[i]
			if g.Group != r.Group || g.Version != r.Version || g.Kind != r.Kind {
				continue
			}
			if !g.RemovedIn.IsZero() && !r.RemovedIn.Less(g.RemovedIn) {
				return fmt.Errorf("overlay: removal of %s %s in %s is not earlier than the data's %s: drop the overlay line",
					gv(r.Group, r.Version), r.Kind, r.RemovedIn, g.RemovedIn)
			}
			g.Source += fmt.Sprintf("; removed_in: overlay %s (data: %s): %s", r.RemovedIn, orNone(g.RemovedIn.String()), r.Source)
			g.RemovedIn, found = r.RemovedIn, true
			if !g.DeprecatedIn.IsZero() && g.RemovedIn.Less(g.DeprecatedIn) {
				g.DeprecatedIn = kubeversion.Version{}
			}
		}
		if !found {
			return fmt.Errorf("overlay: removal of %s %s matches no API row", gv(r.Group, r.Version), r.Kind)
		}
	}
	for _, r := range o.Replacements {
		found := false
		for _, rows := range [][]Row{c.APIs, c.BodyKinds} {
			for i := range rows {
				if rows[i].Group == r.Group && rows[i].Version == r.Version && rows[i].Kind == r.Kind {
					rows[i].Replacement, rows[i].replacementKnown = r.Replacement, true
					rows[i].Source += "; replacement: overlay: " + r.Source
					found = true
				}
			}
		}
		if !found {
			return fmt.Errorf("overlay: replacement for %s %s matches no API row", gv(r.Group, r.Version), r.Kind)
		}
	}
	return nil
}
