// Package sariftest validates SARIF logs in tests against the official SARIF 2.1.0 JSON schema
// (testdata/sarif-2.1.0-rtm.5.json of this module; testdata/README.md says where it is from).
package sariftest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Validate validates doc against the SARIF 2.1.0 schema, formats (uri, uri-reference) asserted
// too: nil when valid, else the validation error. A schema that cannot be loaded fails t.
func Validate(t testing.TB, doc []byte) error {
	t.Helper()
	module, err := testkit.ModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(module, "testdata", "sarif-2.1.0-rtm.5.json"))
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

// Log is what the tests read of a SARIF log: one type for the scan and manifests tests.
type Log struct {
	Schema  string `json:"$schema"`
	Version string `json:"version"`
	Runs    []struct {
		Tool struct {
			Driver struct {
				Name, Version, InformationURI string
				Rules                         []struct {
					ID               string `json:"id"`
					ShortDescription struct{ Text string }
				}
			}
		}
		Results []Result
	}
}

// Result is one result of a Log.
type Result struct {
	RuleID    string `json:"ruleId"`
	RuleIndex int    `json:"ruleIndex"`
	Level     string
	Message   struct{ Text string }
	Locations []struct {
		PhysicalLocation *struct {
			ArtifactLocation struct{ URI string }
			Region           *struct{ StartLine int }
		}
		LogicalLocations []struct {
			Name, FullyQualifiedName, Kind string
			Properties                     map[string]any
		}
	}
	Properties map[string]any
}
