package rules

import (
	"fmt"
)

// merge adds o's entries to c, replacing those with the same key.
func (c *Catalogue) merge(o *Catalogue) {
	for _, r := range o.Rules {
		replaced := false
		for i := range c.Rules {
			if c.Rules[i].ID == r.ID {
				c.Rules[i], replaced = r, true
			}
		}
		if !replaced {
			c.Rules = append(c.Rules, r)
		}
	}
	for _, a := range o.APIs {
		replaced := false
		for i := range c.APIs {
			if c.APIs[i].Group == a.Group && c.APIs[i].Version == a.Version && c.APIs[i].Resource == a.Resource {
				c.APIs[i], replaced = a, true
			}
		}
		if !replaced {
			c.APIs = append(c.APIs, a)
		}
	}
	for _, b := range o.BodyKinds {
		replaced := false
		for i := range c.BodyKinds {
			if c.BodyKinds[i].Group == b.Group && c.BodyKinds[i].Version == b.Version && c.BodyKinds[i].Kind == b.Kind {
				c.BodyKinds[i], replaced = b, true
			}
		}
		if !replaced {
			c.BodyKinds = append(c.BodyKinds, b)
		}
	}
	for _, sv := range o.Served {
		replaced := false
		for i := range c.Served {
			if c.Served[i].Group == sv.Group && c.Served[i].Version == sv.Version && c.Served[i].Resource == sv.Resource {
				c.Served[i], replaced = sv, true
			}
		}
		if !replaced {
			c.Served = append(c.Served, sv)
		}
	}
	mergeAnn := func(dst []AnnotationSpec, src []AnnotationSpec) []AnnotationSpec {
		for _, a := range src {
			replaced := false
			for i := range dst {
				if dst[i].Key == a.Key && dst[i].Prefix == a.Prefix {
					dst[i], replaced = a, true
				}
			}
			if !replaced {
				dst = append(dst, a)
			}
		}
		return dst
	}
	c.Annotations = mergeAnn(c.Annotations, o.Annotations)
	c.ObjectAnnotations = mergeAnn(c.ObjectAnnotations, o.ObjectAnnotations)
	for _, l := range o.Labels {
		replaced := false
		for i := range c.Labels {
			if c.Labels[i].Key == l.Key {
				c.Labels[i], replaced = l, true
			}
		}
		if !replaced {
			c.Labels = append(c.Labels, l)
		}
	}
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
	return nil
}
