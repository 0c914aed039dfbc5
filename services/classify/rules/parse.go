package rules

import (
	"errors"
	"fmt"
	"github.com/auditlens/auditlens/lib/yamlsafe"
	"strings"
	"text/template"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"

	"github.com/auditlens/auditlens/lib/kubeversion"
)

// PosError is a catalogue error at a line and column of a file.
type PosError struct {
	File         string
	Line, Column int
	Msg          string
}

func (e *PosError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// isRelease reports whether s is a Kubernetes release written as the catalogue writes them,
// "MAJOR.MINOR" exactly ("1.25"; not "v1.25" nor "1.25.0").
func isRelease(s string) bool {
	v, err := kubeversion.Parse(s)
	return err == nil && v.String() == s
}

// parse decodes one document strictly and checks each entry, reporting line:column.
func parse(src Source) (*Catalogue, error) {
	var c Catalogue
	// Parsed once: the unknown keys, the decoding and the positions of errors all read this
	// tree (the YAML parse is most of the time a scan takes to start).
	// Within yamlsafe.Config (a rules file is the operator's, --rules-file): refused before
	// the parser holds it when it nests or holds far more than any catalogue (review 3 E2).
	file, perr := yamlsafe.Parse(src.Data, yamlsafe.Config)
	if errors.Is(perr, yamlsafe.ErrTooDeep) || errors.Is(perr, yamlsafe.ErrTooLarge) || errors.Is(perr, yamlsafe.ErrAliasExpansion) {
		return nil, fmt.Errorf("%s: %w", src.Name, perr)
	}
	if perr != nil {
		file = nil
	}
	if err := unknownFields(src, file); err != nil {
		return nil, err
	}
	var err error
	if file != nil && len(file.Docs) == 1 && file.Docs[0].Body != nil {
		err = yaml.NodeToValue(file.Docs[0].Body, &c, yaml.Strict())
	} else {
		err = yaml.UnmarshalWithOptions(src.Data, &c, yaml.Strict())
	}
	if err != nil {
		var ye yaml.Error
		if errors.As(err, &ye) && ye.GetToken() != nil {
			p := ye.GetToken().Position
			return nil, &PosError{src.Name, p.Line, p.Column, ye.GetMessage()}
		}
		return nil, &PosError{File: src.Name, Msg: err.Error()}
	}
	if perr != nil {
		return nil, &PosError{File: src.Name, Msg: perr.Error()}
	}
	at := func(path string, format string, args ...any) error {
		e := &PosError{File: src.Name, Msg: fmt.Sprintf(format, args...)}
		if p, err := yaml.PathString(path); err == nil {
			if n, err := p.FilterFile(file); err == nil && n != nil {
				tk := n.GetToken()
				if mv, ok := n.(*ast.MappingValueNode); ok {
					tk = mv.Key.GetToken()
				}
				e.Line, e.Column = tk.Position.Line, tk.Position.Column
			}
		}
		return e
	}
	if c.SchemaVersion != SchemaVersion {
		return nil, at("$.schema_version", "schema_version %d: this classify reads schema_version %d", c.SchemaVersion, SchemaVersion)
	}
	checkVersions := func(path string, vs ...[2]string) error {
		for _, v := range vs {
			if v[1] != "" && !isRelease(v[1]) {
				return at(path+"."+v[0], "%s %q: want MAJOR.MINOR, e.g. \"1.25\"", v[0], v[1])
			}
		}
		return nil
	}
	seen := map[string]bool{}
	for i, r := range c.Rules {
		p := fmt.Sprintf("$.rules[%d]", i)
		if r.ID == "" {
			return nil, at(p, "rule without id")
		}
		if seen[r.ID] {
			return nil, at(p+".id", "rule %q defined twice", r.ID)
		}
		seen[r.ID] = true
		if _, ok := severities[r.Severity]; !ok {
			return nil, at(p+".severity", "rule %s: severity %q: want info, warning or critical", r.ID, r.Severity)
		}
		if _, ok := confidences[r.Confidence]; !ok {
			return nil, at(p+".confidence", "rule %s: confidence %q: want low, medium or high", r.ID, r.Confidence)
		}
		if err := checkVersions(p, [2]string{"deprecated_in", r.DeprecatedIn}, [2]string{"removed_in", r.RemovedIn}); err != nil {
			return nil, err
		}
		switch r.Level {
		case "", "Metadata", "Request":
		default:
			return nil, at(p+".level", "rule %s: level %q: want Metadata or Request, the audit level the rule needs", r.ID, r.Level)
		}
		if strings.TrimSpace(r.Message) == "" && !r.Disabled {
			return nil, at(p, "rule %s: message is empty: say what the operator should do", r.ID)
		}
		t, err := template.New(r.ID).Option("missingkey=error").Parse(r.Message)
		if err != nil {
			return nil, at(p+".message", "rule %s: message: %v", r.ID, err)
		}
		if err := t.Execute(discard{}, TemplateData{}); err != nil {
			return nil, at(p+".message", "rule %s: message: %v", r.ID, err)
		}
		c.Rules[i].tmpl = t
		if steps, ok := compileMessage(t); ok {
			c.Rules[i].msg = steps
		}
	}
	apis := map[gvr]bool{}
	for i, a := range c.APIs {
		p := fmt.Sprintf("$.apis[%d]", i)
		if a.Version == "" || a.Resource == "" {
			return nil, at(p, "api entry needs version and resource (group is \"\" for the core group)")
		}
		if a.Resource != strings.ToLower(a.Resource) || strings.Contains(a.Resource, "/") {
			return nil, at(p+".resource", "resource %q: want the lower-case plural, e.g. deployments", a.Resource)
		}
		k := gvr{a.Group, a.Version, a.Resource}
		if apis[k] {
			return nil, at(p, "api %s %s listed twice", a.GroupVersion(), a.Resource)
		}
		apis[k] = true
		if a.DeprecatedIn == "" && a.RemovedIn == "" {
			return nil, at(p, "api %s %s: give deprecated_in or removed_in", a.GroupVersion(), a.Resource)
		}
		if err := checkVersions(p, [2]string{"deprecated_in", a.DeprecatedIn}, [2]string{"removed_in", a.RemovedIn}); err != nil {
			return nil, err
		}
	}
	bodies := map[gvr]bool{}
	for i, b := range c.BodyKinds {
		p := fmt.Sprintf("$.body_kinds[%d]", i)
		if b.Version == "" || b.Kind == "" {
			return nil, at(p, "body_kinds entry needs version and kind")
		}
		k := gvr{b.Group, b.Version, b.Kind}
		if bodies[k] {
			return nil, at(p, "body kind %s %s listed twice", groupVersion(b.Group, b.Version), b.Kind)
		}
		bodies[k] = true
		if b.DeprecatedIn == "" && b.RemovedIn == "" {
			return nil, at(p, "body kind %s %s: give deprecated_in or removed_in", groupVersion(b.Group, b.Version), b.Kind)
		}
		if err := checkVersions(p, [2]string{"deprecated_in", b.DeprecatedIn}, [2]string{"removed_in", b.RemovedIn}); err != nil {
			return nil, err
		}
	}
	for i, sv := range c.Served {
		p := fmt.Sprintf("$.served[%d]", i)
		if sv.Version == "" || sv.Resource == "" || sv.Kind == "" {
			return nil, at(p, "served entry needs version, resource and kind")
		}
		if err := checkVersions(p, [2]string{"introduced_in", sv.IntroducedIn}); err != nil {
			return nil, err
		}
	}
	for _, list := range []struct {
		name string
		as   []AnnotationSpec
	}{{"annotations", c.Annotations}, {"object_annotations", c.ObjectAnnotations}} {
		for i, a := range list.as {
			p := fmt.Sprintf("$.%s[%d]", list.name, i)
			if (a.Key == "") == (a.Prefix == "") {
				return nil, at(p, "give exactly one of key and prefix")
			}
			if a.Rule == "" {
				return nil, at(p, "%s entry without rule", list.name)
			}
			if _, ok := severities[a.Severity]; !ok {
				return nil, at(p+".severity", "severity %q: want info, warning or critical", a.Severity)
			}
			if err := checkVersions(p, [2]string{"deprecated_in", a.DeprecatedIn}, [2]string{"removed_in", a.RemovedIn}); err != nil {
				return nil, err
			}
		}
	}
	for i, l := range c.Labels {
		p := fmt.Sprintf("$.labels[%d]", i)
		if l.Key == "" || l.Rule == "" {
			return nil, at(p, "label entry needs key and rule")
		}
		if _, ok := severities[l.Severity]; !ok {
			return nil, at(p+".severity", "severity %q: want info, warning or critical", l.Severity)
		}
		if err := checkVersions(p, [2]string{"deprecated_in", l.DeprecatedIn}, [2]string{"removed_in", l.RemovedIn}); err != nil {
			return nil, err
		}
	}
	for i, sk := range c.VersionSkew {
		p := fmt.Sprintf("$.version_skew[%d]", i)
		if sk.Component == "" || sk.Rule == "" || sk.Agent == "" {
			return nil, at(p, "version_skew entry needs component, rule and agent")
		}
		if sk.Older < 0 || sk.OlderThen < 0 || sk.Newer < 0 || sk.Older > 9 || sk.OlderThen > 9 || sk.Newer > 9 {
			return nil, at(p, "version_skew %s: older, older_then and newer are minor releases, 0 to 9", sk.Component)
		}
		if err := checkVersions(p, [2]string{"older_before", sk.OlderBefore}); err != nil {
			return nil, err
		}
		c.VersionSkew[i].olderBefore, _ = kubeversion.Parse(sk.OlderBefore)
	}
	for i, en := range c.Enumerators {
		p := fmt.Sprintf("$.enumerators[%d]", i)
		if en.Name == "" || (en.User == "" && en.Agent == "") {
			return nil, at(p, "enumerators entry needs a name and a user or an agent")
		}
	}
	for i, r := range c.Runtimes {
		p := fmt.Sprintf("$.runtimes[%d]", i)
		if r.Prefix == "" || r.Rule == "" || r.RemovedIn == "" {
			return nil, at(p, "runtimes entry needs prefix, rule and removed_in")
		}
		if err := checkVersions(p, [2]string{"removed_in", r.RemovedIn}); err != nil {
			return nil, err
		}
	}
	return &c, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
