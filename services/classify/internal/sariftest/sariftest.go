// Package sariftest validates SARIF logs in tests against the official SARIF 2.1.0 JSON schema
// (testdata/sarif-2.1.0-rtm.5.json of this module; testdata/README.md says where it is from).
package sariftest

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Validate validates doc against the SARIF 2.1.0 schema, formats (uri, uri-reference) asserted
// too: nil when valid, else the validation error. A schema that cannot be loaded fails t.
func Validate(t testing.TB, doc []byte) error {
	t.Helper()
	_, here, _, _ := runtime.Caller(0)
	f, err := os.Open(filepath.Join(filepath.Dir(here), "..", "..", "testdata", "sarif-2.1.0-rtm.5.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	schema, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("sarif-2.1.0-rtm.5.json", schema); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("sarif-2.1.0-rtm.5.json")
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}
