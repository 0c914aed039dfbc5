package rules

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

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
		"version_skew":       fields(SkewSpec{}),
		"runtimes":           fields(RuntimeSpec{}),
		"enumerators":        fields(EnumeratorSpec{}),
	}
}()

// unknownFields reports every key the schema does not know in file, the parsed src. A
// document that does not parse (file nil) is left to the decoder, which says why.
func unknownFields(src Source, file *ast.File) error {
	if file == nil || len(file.Docs) == 0 {
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
