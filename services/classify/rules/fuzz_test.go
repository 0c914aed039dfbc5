package rules

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/auditlens/auditlens/lib/auditevent"
)

// FuzzClassify feeds arbitrary lines through the decoder and every rule (body walkers, CSR
// parsing, URI parsing, the client heuristic): nothing may panic, and every match must make a
// finding with a message.
func FuzzClassify(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(corpusDir, "*.jsonl"))
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for _, l := range bytes.Split(b, []byte("\n"))[:min(20, bytes.Count(b, []byte("\n")))] {
			f.Add(l)
		}
	}
	f.Add([]byte(`{"auditID":"a","stage":"s","verb":"create","level":"Request","objectRef":{"resource":"pods"},"requestObject":{"metadata":{"annotations":{"seccomp.security.alpha.kubernetes.io/pod":1}},"spec":{"nodeSelector":[],"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":{"a":1}}}},"tolerations":"x"}}}`))
	f.Add([]byte(`{"auditID":"a","stage":"s","verb":"create","objectRef":{"resource":"certificatesigningrequests"},"requestObject":{"spec":{"usages":["key encipherment"],"request":"!!"}}}`))
	f.Add([]byte(`{"auditID":"a","stage":"s","requestURI":"/apis/x/v1/namespaces","user":{"username":"a@b.c","groups":["3f2504e0-4f89-11d3-9a0c-0305e82c3301"]},"userAgent":"kubectl/v1.9"}`))
	f.Add([]byte(`{"auditID":"a","stage":"s","verb":"create","objectRef":{"resource":"pods","subresource":"eviction"},"requestObject":{"kind":"Eviction","apiVersion":"policy/v1beta1"}}`))
	f.Add([]byte(`{"auditID":"a","stage":"s","verb":"patch","objectRef":{"resource":"services"},"requestObject":{"metadata":{"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"spec\":{\"topologyKeys\":[\"a\"]}}"}}}}`))
	f.Add([]byte(`{"auditID":"a","stage":"s","verb":"list","objectRef":{"resource":"xs","apiGroup":"resource.k8s.io","apiVersion":"v9"},"annotations":{"k8s.io/removed-release":"1.40"}}`))
	e := mustEngine(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		d := auditevent.NewDecoder(1 << 20)
		_ = d.Decode(data, func(ev *auditevent.Event) error {
			for _, m := range e.Classify(ev, nil) {
				if fd := e.Finding(ev, &m, "fuzz", ""); fd.Message == "" || fd.RuleId == "" {
					t.Fatalf("finding without message or rule: %v", fd)
				}
			}
			return nil
		})
	})
}

// FuzzCatalogue loads arbitrary --rules-file documents over the embedded catalogue (the
// rules-file loader: strict decoding, the unknown-field report, the checks, the merge):
// errors are fine, panics are not, and an accepted catalogue must still define every
// built-in rule.
func FuzzCatalogue(f *testing.F) {
	f.Add([]byte("schema_version: 1\n"))
	f.Add([]byte("schema_version: 1\napis:\n  - {group: a, version: v1, resource: xs, removed_in: \"1.30\"}\n"))
	f.Add([]byte("schema_version: 1\nrules:\n  - id: psp\n    severity: info\n    message: \"{{.Name}}\"\n"))
	f.Add([]byte("schema_version: 1\nlabels:\n  - {key: a/b, rule: beta-node-label}\n"))
	f.Add(embedded)
	f.Add(generated)
	f.Add([]byte("schema_version: 1\ncolour: red\napis:\n  - group: a\n    flavour: x\nshape: round\n---\nx: 1\n"))
	f.Add([]byte("schema_version: 1\nbody_kinds:\n  - {group: policy, version: v1beta1, kind: Eviction, removed_in: \"1.25\"}\nserved:\n  - {group: a, version: v1, resource: xs, kind: X}\n"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		c, err := LoadSources(Source{Name: "embedded", Data: embedded}, Source{Name: "fuzz.yaml", Data: doc})
		if err != nil {
			return
		}
		for _, id := range BuiltinRuleIDs {
			if c.Rule(id) == nil {
				t.Fatalf("accepted catalogue lacks %s", id)
			}
		}
		NewEngine(c)
	})
}
