// Package rules holds the rule catalogue (embedded YAML, overridable with --rules-file) and
// the engine that matches audit events against it.
package rules

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"text/template"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// SchemaVersion is the catalogue schema this binary reads.
const SchemaVersion = 1

// Stable rule ids (DESIGN.md). Ids are never renamed; more may be added.
const (
	RemovedAPI               = "removed-api"
	DeprecatedAPI            = "deprecated-api"
	PSP                      = "psp"
	SeccompAlphaAnnotation   = "seccomp-alpha-annotation"
	AppArmorAnnotation       = "apparmor-annotation"
	CSRKeyEnciphermentNonRSA = "csr-key-encipherment-non-rsa"
	BetaNodeLabel            = "beta-node-label"
	NodeRoleMasterLabel      = "node-role-master-label"
	ServiceTopologyKeys      = "service-topology-keys"
	PodSecurityViolation     = "pod-security-violation"
	LegacyAuthProviderClient = "legacy-auth-provider-client"
	LegacySAToken            = "legacy-sa-token"
)

// BuiltinRuleIDs are the rules whose logic is in this package; the catalogue must define each.
var BuiltinRuleIDs = []string{
	RemovedAPI, DeprecatedAPI, PSP, SeccompAlphaAnnotation, AppArmorAnnotation,
	CSRKeyEnciphermentNonRSA, BetaNodeLabel, NodeRoleMasterLabel, ServiceTopologyKeys,
	PodSecurityViolation, LegacyAuthProviderClient, LegacySAToken,
}

//go:embed catalogue.yaml
var embedded []byte

// generated is the API section, written by tools/catalogue (make catalogue).
//
//go:embed apis.generated.yaml
var generated []byte

// Embedded returns the hand-written catalogue built into the binary.
func Embedded() []byte { return append([]byte(nil), embedded...) }

// EmbeddedAPIs returns the generated API section built into the binary.
func EmbeddedAPIs() []byte { return append([]byte(nil), generated...) }

// embeddedSources are the two documents of the built-in catalogue.
func embeddedSources() []Source {
	return []Source{{Name: "embedded catalogue", Data: embedded}, {Name: "embedded apis.generated.yaml", Data: generated}}
}

// Catalogue is the rule catalogue file.
type Catalogue struct {
	SchemaVersion     int              `yaml:"schema_version"`
	Rules             []RuleSpec       `yaml:"rules"`
	APIs              []APISpec        `yaml:"apis"`
	Annotations       []AnnotationSpec `yaml:"annotations"`
	ObjectAnnotations []AnnotationSpec `yaml:"object_annotations"`
	Labels            []LabelSpec      `yaml:"labels"`
	BodyKinds         []BodyKindSpec   `yaml:"body_kinds"`
	Served            []ServedSpec     `yaml:"served"`
}

// RuleSpec describes one rule: how its findings are rated and worded.
type RuleSpec struct {
	ID           string `yaml:"id"`
	Severity     string `yaml:"severity"`   // info, warning or critical
	Confidence   string `yaml:"confidence"` // low, medium or high (default)
	DeprecatedIn string `yaml:"deprecated_in"`
	RemovedIn    string `yaml:"removed_in"`
	Replacement  string `yaml:"replacement"`
	// Message is a text/template over the finding (see catalogue.yaml's header).
	Message string `yaml:"message"`
	// Disabled switches the rule off.
	Disabled bool `yaml:"disabled"`
	// IgnoreUsers lists usernames whose requests never produce this rule's findings; a
	// trailing '*' matches a prefix.
	IgnoreUsers []string `yaml:"ignore_users"`

	tmpl *template.Template
}

// APISpec is one removed or deprecated API version.
type APISpec struct {
	Group        string `yaml:"group"`
	Version      string `yaml:"version"`
	Resource     string `yaml:"resource"`
	Kind         string `yaml:"kind"`
	DeprecatedIn string `yaml:"deprecated_in"`
	RemovedIn    string `yaml:"removed_in"`
	Replacement  string `yaml:"replacement"`
	Note         string `yaml:"note"`
	// Source says where the values come from (module version, tag, overlay line).
	Source string `yaml:"source"`
}

// GroupVersion is "group/version", or "version" for the core group.
func (a APISpec) GroupVersion() string { return groupVersion(a.Group, a.Version) }

// BodyKindSpec is a removed or deprecated version of a kind that is only ever the body of a
// subresource request (an Eviction posted to pods/eviction), matched on the body's apiVersion.
type BodyKindSpec struct {
	Group        string `yaml:"group"`
	Version      string `yaml:"version"`
	Kind         string `yaml:"kind"`
	Subresource  string `yaml:"subresource"`
	DeprecatedIn string `yaml:"deprecated_in"`
	RemovedIn    string `yaml:"removed_in"`
	Replacement  string `yaml:"replacement"`
	Source       string `yaml:"source"`
}

// ServedSpec is a resource the newest Kubernetes release serves: where a replacement is looked
// up by group and resource or kind.
type ServedSpec struct {
	Group    string `yaml:"group"`
	Version  string `yaml:"version"`
	Resource string `yaml:"resource"`
	Kind     string `yaml:"kind"`
}

// AnnotationSpec matches an annotation by exact key or by prefix.
type AnnotationSpec struct {
	Key          string `yaml:"key"`
	Prefix       string `yaml:"prefix"`
	Rule         string `yaml:"rule"`
	Severity     string `yaml:"severity"`
	DeprecatedIn string `yaml:"deprecated_in"`
	RemovedIn    string `yaml:"removed_in"`
	Replacement  string `yaml:"replacement"`
}

func (a AnnotationSpec) matches(key string) bool {
	if a.Key != "" {
		return key == a.Key
	}
	return strings.HasPrefix(key, a.Prefix)
}

func (a AnnotationSpec) id() string {
	if a.Key != "" {
		return "key " + a.Key
	}
	return "prefix " + a.Prefix
}

// LabelSpec is a deprecated node label (or taint key).
type LabelSpec struct {
	Key          string `yaml:"key"`
	Rule         string `yaml:"rule"`
	Severity     string `yaml:"severity"`
	DeprecatedIn string `yaml:"deprecated_in"`
	RemovedIn    string `yaml:"removed_in"`
	Replacement  string `yaml:"replacement"`
}

// Source is one catalogue document: its name for messages and its bytes.
type Source struct {
	Name string
	Data []byte
}

// Load reads the embedded catalogue, then each file in order, adding or replacing entries.
func Load(files ...string) (*Catalogue, error) {
	srcs := embeddedSources()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--rules-file: %w", err)
		}
		srcs = append(srcs, Source{Name: f, Data: b})
	}
	return LoadSources(srcs...)
}

// LoadSources is Load with explicit documents; the first is the base.
func LoadSources(srcs ...Source) (*Catalogue, error) {
	var out *Catalogue
	for _, src := range srcs {
		c, err := parse(src)
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = c
		} else {
			out.merge(c)
		}
	}
	if out == nil {
		return nil, errors.New("no catalogue")
	}
	if err := out.complete(); err != nil {
		return nil, err
	}
	return out, nil
}

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

var versionRE = regexp.MustCompile(`^[1-9][0-9]*\.[0-9]+$`)

// parse decodes one document strictly and checks each entry, reporting line:column.
func parse(src Source) (*Catalogue, error) {
	var c Catalogue
	if err := unknownFields(src); err != nil {
		return nil, err
	}
	if err := yaml.UnmarshalWithOptions(src.Data, &c, yaml.Strict()); err != nil {
		var ye yaml.Error
		if errors.As(err, &ye) && ye.GetToken() != nil {
			p := ye.GetToken().Position
			return nil, &PosError{src.Name, p.Line, p.Column, ye.GetMessage()}
		}
		return nil, &PosError{File: src.Name, Msg: err.Error()}
	}
	file, err := parser.ParseBytes(src.Data, 0)
	if err != nil {
		return nil, &PosError{File: src.Name, Msg: err.Error()}
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
			if v[1] != "" && !versionRE.MatchString(v[1]) {
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
	return &c, nil
}

// UnknownFieldsError names every unknown field of a catalogue document, top-level keys and
// keys of list entries alike, each at its line:column (strict decoding stops at one).
type UnknownFieldsError struct{ Fields []*PosError }

func (e *UnknownFieldsError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Error()
	}
	return strings.Join(parts, "; ")
}

// knownFields are the keys of each level of the schema, from the yaml tags of its types.
var knownFields = func() map[string]map[string]bool {
	fields := func(v any) map[string]bool {
		out := map[string]bool{}
		t := reflect.TypeOf(v)
		for i := 0; i < t.NumField(); i++ {
			if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); tag != "" && tag != "-" {
				out[tag] = true
			}
		}
		return out
	}
	return map[string]map[string]bool{
		"":                   fields(Catalogue{}),
		"rules":              fields(RuleSpec{}),
		"apis":               fields(APISpec{}),
		"annotations":        fields(AnnotationSpec{}),
		"object_annotations": fields(AnnotationSpec{}),
		"labels":             fields(LabelSpec{}),
		"body_kinds":         fields(BodyKindSpec{}),
		"served":             fields(ServedSpec{}),
	}
}()

// unknownFields reports every key the schema does not know. A document that does not parse
// is left to the decoder, which says why.
func unknownFields(src Source) error {
	file, err := parser.ParseBytes(src.Data, 0)
	if err != nil || len(file.Docs) == 0 {
		return nil
	}
	var bad []*PosError
	pairs := func(n ast.Node) []*ast.MappingValueNode {
		switch m := n.(type) {
		case *ast.MappingNode:
			return m.Values
		case *ast.MappingValueNode:
			return []*ast.MappingValueNode{m}
		}
		return nil
	}
	check := func(kvs []*ast.MappingValueNode, level string) {
		known := knownFields[level]
		for _, kv := range kvs {
			if kv == nil || kv.Key == nil {
				continue
			}
			key := kv.Key.GetToken()
			if key == nil || known[key.Value] {
				continue
			}
			where := "top-level key"
			if level != "" {
				where = level + " field"
			}
			bad = append(bad, &PosError{src.Name, key.Position.Line, key.Position.Column, fmt.Sprintf("unknown %s %q", where, key.Value)})
		}
	}
	for _, doc := range file.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		top := pairs(doc.Body)
		check(top, "")
		for _, kv := range top {
			if kv == nil || kv.Key == nil {
				continue
			}
			seq, ok := kv.Value.(*ast.SequenceNode)
			if !ok || kv.Key.GetToken() == nil || kv.Key.GetToken().Value == "" || knownFields[kv.Key.GetToken().Value] == nil {
				continue
			}
			for _, item := range seq.Values {
				check(pairs(item), kv.Key.GetToken().Value)
			}
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return &UnknownFieldsError{bad}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

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

// Rule returns the rule with id, or nil.
func (c *Catalogue) Rule(id string) *RuleSpec {
	for i := range c.Rules {
		if c.Rules[i].ID == id {
			return &c.Rules[i]
		}
	}
	return nil
}

type gvr struct{ group, version, resource string }

func groupVersion(group, version string) string {
	if group == "" {
		return version
	}
	return group + "/" + version
}
