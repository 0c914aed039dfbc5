package rules

import (
	"fmt"
)

// merge adds o's entries to c, replacing those with the same key.
func (c *Catalogue) merge(o *Catalogue) {
	if o.NewestRelease != "" {
		c.NewestRelease = o.NewestRelease
	}
	c.Rules = mergeBy(c.Rules, o.Rules, func(r RuleSpec) string { return r.ID })
	c.APIs = mergeBy(c.APIs, o.APIs, func(a APISpec) gvr { return gvr{a.Group, a.Version, a.Resource} })
	c.BodyKinds = mergeBy(c.BodyKinds, o.BodyKinds, func(b BodyKindSpec) gvr { return gvr{b.Group, b.Version, b.Kind} })
	c.Served = mergeBy(c.Served, o.Served, func(s ServedSpec) gvr { return gvr{s.Group, s.Version, s.Resource} })
	annotation := func(a AnnotationSpec) [2]string { return [2]string{a.Key, a.Prefix} }
	c.Annotations = mergeBy(c.Annotations, o.Annotations, annotation)
	c.ObjectAnnotations = mergeBy(c.ObjectAnnotations, o.ObjectAnnotations, annotation)
	c.Labels = mergeBy(c.Labels, o.Labels, func(l LabelSpec) string { return l.Key })
	c.VersionSkew = mergeBy(c.VersionSkew, o.VersionSkew, func(s SkewSpec) string { return s.Component })
	c.Runtimes = mergeBy(c.Runtimes, o.Runtimes, func(r RuntimeSpec) string { return r.Prefix })
	c.Enumerators = mergeBy(c.Enumerators, o.Enumerators, func(e EnumeratorSpec) string { return e.Name })
}

// mergeBy replaces each entry of dst that has the key of an entry of src with it, and
// appends the entries of src whose key dst lacks.
func mergeBy[T any, K comparable](dst, src []T, key func(T) K) []T {
	for _, s := range src {
		k, replaced := key(s), false
		for i := range dst {
			if key(dst[i]) == k {
				dst[i], replaced = s, true
			}
		}
		if !replaced {
			dst = append(dst, s)
		}
	}
	return dst
}

// complete checks what only the merged catalogue can show: every built-in rule is defined
// and every entry names a defined rule.
func (c *Catalogue) complete() error {
	defined := map[string]bool{}
	for _, r := range c.Rules {
		defined[r.ID] = true
	}
	for _, id := range BuiltinRuleIDs {
		if !defined[id] {
			return fmt.Errorf("catalogue: built-in rule %q is not defined", id)
		}
	}
	for _, a := range c.Annotations {
		if !defined[a.Rule] {
			return fmt.Errorf("catalogue: annotations entry %s names undefined rule %q", a.id(), a.Rule)
		}
	}
	for _, a := range c.ObjectAnnotations {
		if !defined[a.Rule] {
			return fmt.Errorf("catalogue: object_annotations entry %s names undefined rule %q", a.id(), a.Rule)
		}
	}
	for _, l := range c.Labels {
		if !defined[l.Rule] {
			return fmt.Errorf("catalogue: labels entry %s names undefined rule %q", l.Key, l.Rule)
		}
	}
	for _, s := range c.VersionSkew {
		if !defined[s.Rule] {
			return fmt.Errorf("catalogue: version_skew entry %s names undefined rule %q", s.Component, s.Rule)
		}
	}
	for _, r := range c.Runtimes {
		if !defined[r.Rule] {
			return fmt.Errorf("catalogue: runtimes entry %s names undefined rule %q", r.Prefix, r.Rule)
		}
	}
	return nil
}
