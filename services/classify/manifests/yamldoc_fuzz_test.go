package manifests

import (
	"errors"
	"reflect"
	"testing"

	"github.com/goccy/go-yaml"
)

// FuzzDecodeDocument checks the bounded decoder against go-yaml's own Unmarshal on small
// documents: where Unmarshal decodes a document, decodeDocument decodes the same value (no
// bound refuses a document of a few hundred bytes and little nesting), or refuses it for
// aliases only.
func FuzzDecodeDocument(f *testing.F) {
	for _, s := range []string{
		"a: 1\nb: [x, {c: d}]\n",
		"a: &x {b: 1}\nc: *x\nd: {<<: *x, e: 2}\n",
		"k: |\n  [[[\n  {{\nv: '[['\nw: \"{\"\n",
		"- - - a\n  - b\n- c\n",
		"[[[[1]]], {a: [b, {c: [d]}]}]\n",
		"a: # [[[\n  b\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 512 {
			return
		}
		var want any
		if err := yaml.Unmarshal(data, &want); err != nil {
			return
		}
		docs := splitDocuments(data)
		if len(docs) != 1 {
			return
		}
		got, err := decodeDocument(docs[0].data, 1<<20)
		if errors.Is(err, ErrAliasExpansion) {
			return
		}
		if err != nil {
			t.Fatalf("go-yaml decodes %q, decodeDocument: %v", data, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: decodeDocument %#v, go-yaml %#v", data, got, want)
		}
	})
}
