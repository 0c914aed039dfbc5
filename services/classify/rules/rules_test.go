package rules

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/auditlens/auditlens/lib/auditevent"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
)

type ruleCase struct {
	Name    string                       `yaml:"name"`
	Event   map[string]any               `yaml:"event"`
	Must    []string                     `yaml:"must"`
	MustNot []string                     `yaml:"must_not"`
	Expect  map[string]map[string]string `yaml:"expect"`
}

type caseFile struct {
	BaseEvent map[string]any `yaml:"base_event"`
	Cases     []ruleCase     `yaml:"cases"`
}

func mustEngine(t testing.TB) *Engine {
	t.Helper()
	c, err := Load()
	if err != nil {
		t.Fatalf("load embedded catalogue: %v", err)
	}
	return NewEngine(c)
}

// csvRows reads testdata/removed-apis.csv (a copy of shared/reference/removed-apis.csv).
func csvRows(t testing.TB) []map[string]string {
	t.Helper()
	f, err := os.Open("testdata/removed-apis.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for _, r := range recs[1:] {
		m := map[string]string{}
		for i, h := range recs[0] {
			m[h] = r[i]
		}
		out = append(out, m)
	}
	if len(out) < 57 {
		t.Fatalf("removed-apis.csv has %d rows, want 57", len(out))
	}
	return out
}

func TestCatalogueHasEveryCSVRow(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range csvRows(t) {
		var a *APISpec
		for i := range c.APIs {
			if c.APIs[i].Group == r["group"] && c.APIs[i].Version == r["version"] && c.APIs[i].Resource == r["resource"] {
				a = &c.APIs[i]
			}
		}
		if a == nil {
			t.Errorf("catalogue lacks %s/%s %s", r["group"], r["version"], r["resource"])
			continue
		}
		if a.Kind != r["kind"] || a.DeprecatedIn != r["deprecated_in"] || a.RemovedIn != r["removed_in"] || a.Replacement != r["replacement_group_version"] {
			t.Errorf("catalogue %+v differs from CSV row %v", *a, r)
		}
	}
}

// csvCases makes one case per CSV row: a request to the removed version, answered 404.
func csvCases(t testing.TB) []ruleCase {
	var out []ruleCase
	for _, r := range csvRows(t) {
		path := "/apis/" + r["group"] + "/" + r["version"] + "/namespaces/ns1/" + r["resource"]
		out = append(out, ruleCase{
			Name: fmt.Sprintf("csv %s/%s %s", r["group"], r["version"], r["resource"]),
			Event: map[string]any{
				"verb":           "list",
				"requestURI":     path,
				"objectRef":      map[string]any{"resource": r["resource"], "namespace": "ns1", "apiGroup": r["group"], "apiVersion": r["version"]},
				"responseStatus": map[string]any{"metadata": map[string]any{}, "code": 404, "status": "Failure", "reason": "NotFound"},
			},
			Must:    []string{RemovedAPI},
			MustNot: []string{DeprecatedAPI},
			Expect: map[string]map[string]string{RemovedAPI: {
				"removed_in": r["removed_in"], "deprecated_in": r["deprecated_in"], "replacement": r["replacement_group_version"],
				"api_group": r["group"], "api_version": r["version"], "resource": r["resource"], "response_code": "404",
			}},
		})
	}
	return out
}

func loadCases(t testing.TB) caseFile {
	t.Helper()
	b, err := os.ReadFile("testdata/cases.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cf caseFile
	if err := yaml.UnmarshalWithOptions(b, &cf, yaml.Strict()); err != nil {
		t.Fatalf("testdata/cases.yaml: %v", err)
	}
	return cf
}

// findingFields flattens a finding to its snake_case contract fields.
func findingFields(t testing.TB, f *auditlensv1.Finding) map[string]string {
	t.Helper()
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range m {
		out[k] = fmt.Sprint(v)
	}
	return out
}

func TestRuleCases(t *testing.T) {
	e := mustEngine(t)
	cf := loadCases(t)
	cases := append(cf.Cases, csvCases(t)...)
	fired := map[string]int{}
	known := map[string]bool{}
	for _, r := range e.Catalogue().Rules {
		known[r.ID] = true
	}
	for _, c := range cases {
		for _, id := range append(append(slices.Clone(c.Must), c.MustNot...), slices.Collect(maps.Keys(c.Expect))...) {
			if !known[id] {
				t.Fatalf("case %q names unknown rule %q", c.Name, id)
			}
		}
		t.Run(c.Name, func(t *testing.T) {
			ev := maps.Clone(cf.BaseEvent)
			maps.Copy(ev, c.Event)
			data, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			d := auditevent.NewDecoder(0)
			got := map[string]map[string]string{}
			err = d.Decode(data, func(ev *auditevent.Event) error {
				for _, m := range e.Classify(ev, nil) {
					f := e.Finding(ev, &m, "test", "")
					if f.Message == "" || strings.Contains(f.Message, "<no value>") {
						t.Errorf("%s: bad message %q", m.Rule.ID, f.Message)
					}
					got[m.Rule.ID] = findingFields(t, f)
					fired[m.Rule.ID]++
				}
				return nil
			})
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			for _, id := range c.Must {
				if got[id] == nil {
					t.Errorf("rule %s did not fire; fired: %v", id, slices.Sorted(maps.Keys(got)))
				}
			}
			for _, id := range c.MustNot {
				if got[id] != nil {
					t.Errorf("rule %s fired: %s", id, got[id]["message"])
				}
			}
			for id, want := range c.Expect {
				for k, v := range want {
					if g := got[id][k]; g != v {
						t.Errorf("rule %s: %s = %q, want %q", id, k, g, v)
					}
				}
			}
		})
	}
	for _, id := range BuiltinRuleIDs {
		if fired[id] == 0 {
			t.Errorf("no case makes rule %s fire", id)
		}
	}
}

func TestCatalogueErrorsNameLineAndColumn(t *testing.T) {
	base := Source{Name: "embedded", Data: embedded}
	for _, tc := range []struct{ name, doc, want string }{
		{"unknown field", "schema_version: 1\napis:\n  - {group: a, version: v1, resource: xs, removed_in: \"1.30\", colour: red}\n", "over.yaml:3:"},
		{"bad severity", "schema_version: 1\nrules:\n  - id: my-rule\n    severity: loud\n    message: hi\n", "over.yaml:4:15: rule my-rule: severity \"loud\""},
		{"bad version", "schema_version: 1\napis:\n  - group: a\n    version: v1\n    resource: xs\n    removed_in: v1.30\n", "over.yaml:6:17: removed_in \"v1.30\""},
		{"schema", "schema_version: 2\n", "over.yaml:1:17: schema_version 2"},
		{"template", "schema_version: 1\nrules:\n  - id: r\n    severity: info\n    message: \"{{.Nope}}\"\n", "over.yaml:5:14: rule r: message"},
		{"undefined rule", "schema_version: 1\nlabels:\n  - {key: a/b, rule: no-such-rule}\n", "undefined rule \"no-such-rule\""},
		{"duplicate key", "schema_version: 1\nschema_version: 1\n", "over.yaml:2:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadSources(base, Source{Name: "over.yaml", Data: []byte(tc.doc)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestRulesFileAddsAndOverrides(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/extra.yaml"
	doc := `schema_version: 1
rules:
  - id: deprecated-api
    severity: warning
    message: "custom: {{.GroupVersion}} {{.Resource}}"
  - id: legacy-auth-provider-client
    severity: warning
    disabled: true
apis:
  - {group: widgets.example.com, version: v1alpha1, resource: widgets, kind: Widget, deprecated_in: "1.35", removed_in: "1.38", replacement: widgets.example.com/v1}
  - {group: apps, version: v1beta1, resource: deployments, kind: Deployment, deprecated_in: "1.8", removed_in: "1.16", replacement: apps/v1}
labels:
  - {key: example.com/legacy-pool, rule: beta-node-label, deprecated_in: "1.30", replacement: example.com/pool}
`
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir + "/missing.yaml"); err == nil || !strings.Contains(err.Error(), "--rules-file") {
		t.Fatalf("missing file: %v", err)
	}
	e := NewEngine(c)
	classify := func(ev string) map[string]string {
		out := map[string]string{}
		err := auditevent.NewDecoder(0).Decode([]byte(ev), func(ev *auditevent.Event) error {
			for _, m := range e.Classify(ev, nil) {
				f := e.Finding(ev, &m, "c", "")
				out[m.Rule.ID] = f.RemovedIn + "|" + f.DeprecatedIn + "|" + f.Message
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	got := classify(`{"auditID":"1","stage":"ResponseComplete","verb":"list","objectRef":{"resource":"widgets","apiGroup":"widgets.example.com","apiVersion":"v1alpha1"}}`)
	if !strings.HasPrefix(got[RemovedAPI], "1.38|1.35|") {
		t.Errorf("added api: %v", got)
	}
	got = classify(`{"auditID":"1","stage":"ResponseComplete","verb":"list","objectRef":{"resource":"deployments","apiGroup":"apps","apiVersion":"v1beta1"}}`)
	if !strings.HasPrefix(got[RemovedAPI], "1.16|1.8|") {
		t.Errorf("overridden api: %v", got)
	}
	got = classify(`{"auditID":"1","stage":"ResponseComplete","verb":"list","objectRef":{"resource":"things","apiGroup":"x.io","apiVersion":"v1"},"annotations":{"k8s.io/deprecated":"true"}}`)
	if got[DeprecatedAPI] != "||custom: x.io/v1 things" {
		t.Errorf("overridden rule: %q", got[DeprecatedAPI])
	}
	got = classify(`{"auditID":"1","stage":"ResponseComplete","verb":"get","user":{"username":"a@b.example.com"},"userAgent":"kubectl/v1.20.0 (linux/amd64) kubernetes/x","objectRef":{"resource":"pods","apiVersion":"v1"}}`)
	if _, ok := got[LegacyAuthProviderClient]; ok {
		t.Errorf("disabled rule fired: %v", got)
	}
	got = classify(`{"auditID":"1","stage":"ResponseComplete","verb":"create","level":"Request","objectRef":{"resource":"pods","apiVersion":"v1"},"requestObject":{"spec":{"nodeSelector":{"example.com/legacy-pool":"a"}}}}`)
	if _, ok := got[BetaNodeLabel]; !ok {
		t.Errorf("added label: %v", got)
	}
}

func TestParseURI(t *testing.T) {
	for uri, want := range map[string]string{
		"/api/v1/namespaces/a/pods/x/log?follow=1": "|v1|pods",
		"/api/v1/nodes": "|v1|nodes",
		"/apis/apps/v1beta1/namespaces/a/deployments":       "apps|v1beta1|deployments",
		"/apis/batch/v1beta1/watch/namespaces/a/cronjobs":   "batch|v1beta1|cronjobs",
		"/apis/policy/v1beta1/podsecuritypolicies/psp-name": "policy|v1beta1|podsecuritypolicies",
		"/api/v1/namespaces/kube-system":                    "|v1|namespaces",
		"/healthz":                                          "||",
		"/apis/apps":                                        "||",
	} {
		g, v, r := parseURI(uri)
		if got := g + "|" + v + "|" + r; got != want {
			t.Errorf("parseURI(%q) = %q, want %q", uri, got, want)
		}
	}
}
