package rules

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
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
	// Contains and Lacks: text the message of a rule's finding must and must not contain.
	Contains map[string][]string `yaml:"contains"`
	Lacks    map[string][]string `yaml:"lacks"`
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
	if len(out) < 56 {
		t.Fatalf("removed-apis.csv has %d rows, want 56", len(out))
	}
	return out
}

// csvDifferences are the rows where the generated catalogue departs on purpose from the
// hand-collected removed-apis.csv: the lifecycle data (the apiserver's own deprecation
// warnings) and a replacement that is served today win. Key "group/version resource".
var csvDifferences = map[string]struct{ deprecatedIn, replacement, why string }{
	"extensions/v1beta1 podsecuritypolicies":                           {"1.11", psa, "lifecycle data says 1.11 (removed-apis.md: one release off); its successor policy/v1beta1 was removed too"},
	"extensions/v1beta1 daemonsets":                                    {"1.8", "", "lifecycle data: deprecated 1.8 (the CSV took pluto's 1.9)"},
	"extensions/v1beta1 deployments":                                   {"1.8", "", "lifecycle data: deprecated 1.8"},
	"extensions/v1beta1 replicasets":                                   {"1.8", "", "lifecycle data: deprecated 1.8 (pluto gives none)"},
	"apps/v1beta1 deployments":                                         {"1.8", "", "lifecycle data: deprecated 1.8"},
	"apps/v1beta1 statefulsets":                                        {"1.8", "", "lifecycle data: deprecated 1.8"},
	"apps/v1beta2 replicasets":                                         {"1.9", "", "lifecycle data: deprecated 1.9 (pluto gives none)"},
	"policy/v1beta1 podsecuritypolicies":                               {"", psa, "no API replaces PSP: the guide says Pod Security Admission"},
	"flowcontrol.apiserver.k8s.io/v1beta1 flowschemas":                 {"", "flowcontrol.apiserver.k8s.io/v1", "v1beta3, the tagged successor, was removed in 1.32: v1 is served"},
	"flowcontrol.apiserver.k8s.io/v1beta1 prioritylevelconfigurations": {"", "flowcontrol.apiserver.k8s.io/v1", "v1beta3 was removed in 1.32: v1 is served"},
}

const psa = "Pod Security Admission (pod-security.kubernetes.io/* namespace labels)"

// csvExpect is what the catalogue must say for a CSV row: the CSV's values, or the explained
// difference.
func csvExpect(r map[string]string) (deprecatedIn, replacement string) {
	deprecatedIn, replacement = r["deprecated_in"], r["replacement_group_version"]
	if d, ok := csvDifferences[r["group"]+"/"+r["version"]+" "+r["resource"]]; ok {
		if d.deprecatedIn != "" {
			deprecatedIn = d.deprecatedIn
		}
		if d.replacement != "" {
			replacement = d.replacement
		}
	}
	return deprecatedIn, replacement
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
		dep, repl := csvExpect(r)
		if a.Kind != r["kind"] || a.RemovedIn != r["removed_in"] || a.DeprecatedIn != dep || a.Replacement != repl {
			t.Errorf("catalogue %s %s %s: kind %s deprecated_in %q removed_in %q replacement %q; CSV row %v (explained: deprecated_in %q replacement %q)",
				a.GroupVersion(), a.Resource, a.Source, a.Kind, a.DeprecatedIn, a.RemovedIn, a.Replacement, r, dep, repl)
		}
	}
}

// csvCases makes one case per CSV row: a request to the removed version, answered 404.
func csvCases(t testing.TB) []ruleCase {
	var out []ruleCase
	for _, r := range csvRows(t) {
		dep, repl := csvExpect(r)
		out = append(out, listCase(fmt.Sprintf("csv %s/%s %s", r["group"], r["version"], r["resource"]),
			r["group"], r["version"], r["resource"], map[string]string{
				"removed_in": r["removed_in"], "deprecated_in": dep, "replacement": repl}))
	}
	return out
}

// listCase is a `list` of group/version/resource answered 404, with no annotation: what a
// cluster that already removed the API logs. It must give removed-api with want's fields; on
// podsecuritypolicies, the psp rule alone with those fields (one finding per request).
func listCase(name, group, version, resource string, want map[string]string) ruleCase {
	path := "/apis/" + group + "/" + version + "/namespaces/ns1/" + resource
	if group == "" {
		path = "/api/" + version + "/namespaces/ns1/" + resource
	}
	exp := map[string]string{"api_group": group, "api_version": version, "resource": resource, "response_code": "404"}
	maps.Copy(exp, want)
	rule, mustNot := RemovedAPI, []string{DeprecatedAPI}
	if resource == "podsecuritypolicies" {
		rule, mustNot = PSP, append(mustNot, RemovedAPI)
	}
	return ruleCase{
		Name: name,
		Event: map[string]any{
			"verb":           "list",
			"requestURI":     path,
			"objectRef":      map[string]any{"resource": resource, "namespace": "ns1", "apiGroup": group, "apiVersion": version},
			"responseStatus": map[string]any{"metadata": map[string]any{}, "code": 404, "status": "Failure", "reason": "NotFound"},
		},
		Must:    []string{rule},
		MustNot: mustNot,
		Expect:  map[string]map[string]string{rule: exp},
	}
}

// generatedAPIs parses the embedded apis.generated.yaml alone: the generator's own output.
func generatedAPIs(t testing.TB) *Catalogue {
	t.Helper()
	c, err := parse(Source{Name: "apis.generated.yaml", Data: generated})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// generatedCases makes one case per removal the generator wrote: one 404 `list` with no
// annotation must give removed-api with that exact release and replacement, so the engine
// and the generated file cannot drift apart.
func generatedCases(t testing.TB) []ruleCase {
	var out []ruleCase
	for _, a := range generatedAPIs(t).APIs {
		if a.RemovedIn == "" {
			continue
		}
		out = append(out, listCase(fmt.Sprintf("generated %s %s", a.GroupVersion(), a.Resource), a.Group, a.Version, a.Resource,
			map[string]string{"removed_in": a.RemovedIn, "deprecated_in": a.DeprecatedIn, "replacement": a.Replacement}))
	}
	return out
}

var gvReplacementRE = regexp.MustCompile(`^(?:([a-z0-9.-]+)/)?(v[0-9]+(?:(?:alpha|beta)[0-9]+)?)(?: ([A-Z][A-Za-z0-9]+))?$`)

// TestGeneratedCatalogueIsComplete: every removal release from 1.16 to 1.44 that upstream
// data knows is there, the examples of issue 10 have their exact release, and every
// replacement names a version served today (or the data or overlay says there is none, or
// says in words what replaces it).
func TestGeneratedCatalogueIsComplete(t *testing.T) {
	c := generatedAPIs(t)
	served := map[[3]string]bool{}
	for _, s := range c.Served {
		served[[3]string{s.Group, s.Version, s.Kind}] = true
	}
	removals, releases := 0, map[string]bool{}
	rows := map[string]APISpec{}
	for _, a := range c.APIs {
		rows[a.GroupVersion()+" "+a.Resource] = a
		if a.RemovedIn == "" {
			continue
		}
		removals++
		releases[a.RemovedIn] = true
		switch m := gvReplacementRE.FindStringSubmatch(a.Replacement); {
		case a.Replacement == "":
			if !strings.Contains(a.Source, "none") && !strings.Contains(a.Source, "no_replacement") {
				t.Errorf("%s %s: no replacement, and its source does not say none exists: %s", a.GroupVersion(), a.Resource, a.Source)
			}
		case m != nil:
			kind := a.Kind
			if m[3] != "" {
				kind = m[3]
			}
			if !served[[3]string{m[1], m[2], kind}] && !strings.Contains(a.Note, "CRD") {
				t.Errorf("%s %s: replacement %q is not served today", a.GroupVersion(), a.Resource, a.Replacement)
			}
		case !strings.Contains(a.Source, "overlay") && !strings.HasPrefix(a.Replacement, "the next "):
			t.Errorf("%s %s: replacement %q is neither a served version nor from the overlay", a.GroupVersion(), a.Resource, a.Replacement)
		}
	}
	if removals < 100 {
		t.Errorf("%d API versions with a removal release, want at least the 100 issue 10 counted", removals)
	}
	for _, r := range []string{"1.16", "1.22", "1.25", "1.26", "1.29", "1.32", "1.33", "1.34", "1.37", "1.38", "1.39", "1.40", "1.44"} {
		if !releases[r] {
			t.Errorf("no removal in %s", r)
		}
	}
	for key, want := range map[string]string{
		"admissionregistration.k8s.io/v1beta1 validatingadmissionpolicies": "1.34",
		"storage.k8s.io/v1beta1 volumeattributesclasses":                   "1.37",
		"networking.k8s.io/v1beta1 ipaddresses":                            "1.37",
		"resource.k8s.io/v1beta1 resourceclaims":                           "1.38",
		"rbac.authorization.k8s.io/v1alpha1 roles":                         "1.23",
		"scheduling.k8s.io/v1alpha1 priorityclasses":                       "1.23",
		"flowcontrol.apiserver.k8s.io/v1beta3 flowschemas":                 "1.32",
	} {
		if rows[key].RemovedIn != want {
			t.Errorf("%s: removed_in %q, want %q", key, rows[key].RemovedIn, want)
		}
	}
	if _, ok := rows["apps/v1beta1 replicasets"]; ok {
		t.Error("apps/v1beta1 replicasets never existed")
	}
	if r := rows["resource.k8s.io/v1beta1 resourceclaims"].Replacement; r != "resource.k8s.io/v1" {
		t.Errorf("resource.k8s.io/v1beta1 resourceclaims: replacement %q", r)
	}
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
	cases = append(cases, generatedCases(t)...)
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
			for id, texts := range c.Contains {
				for _, x := range texts {
					if !strings.Contains(got[id]["message"], x) {
						t.Errorf("rule %s: message %q lacks %q", id, got[id]["message"], x)
					}
				}
			}
			for id, texts := range c.Lacks {
				for _, x := range texts {
					if strings.Contains(got[id]["message"], x) {
						t.Errorf("rule %s: message %q contains %q", id, got[id]["message"], x)
					}
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
		{"several unknown keys", "schema_version: 1\ncolour: red\napis:\n  - group: a\n    flavour: x\nshape: round\n",
			"over.yaml:2:1: unknown top-level key \"colour\"; over.yaml:6:1: unknown top-level key \"shape\"; over.yaml:5:5: unknown apis field \"flavour\""},
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

func TestCollapseSpace(t *testing.T) {
	for in, want := range map[string]string{"": "", "  a \n\t b  ": "a b", "a": "a", "x  y\n\nz ": "x y z", " é  ü ": "é ü"} {
		if got := collapseSpace(in); got != want || got != strings.Join(strings.Fields(in), " ") {
			t.Errorf("collapseSpace(%q) = %q, want %q", in, got, want)
		}
	}
}

// The advice of a removed-API finding depends on the caller: a tool is told to move (upgrade
// it, re-apply its manifests); the control plane's own client is told it moves with the
// control plane's upgrade. A user who merely sends the controller manager's agent is a tool.
func TestRemovedAPIAdviceByCaller(t *testing.T) {
	cat, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	e := NewEngine(cat)
	messageOf := func(user, ua string) string {
		ev := `{"auditID":"1","stage":"ResponseComplete","verb":"list","user":{"username":"` + user + `"},"userAgent":"` + ua +
			`","objectRef":{"resource":"poddisruptionbudgets","apiGroup":"policy","apiVersion":"v1beta1"}}`
		msg := ""
		if err := auditevent.NewDecoder(0).Decode([]byte(ev), func(ev *auditevent.Event) error {
			for _, m := range e.Classify(ev, nil) {
				if m.Rule.ID == RemovedAPI {
					msg = e.Finding(ev, &m, "c", "").Message
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return msg
	}
	const plane, tool = "This client is the control plane itself: it moves to policy/v1 when the control plane is upgraded", "upgrade the tool or controller with this user agent"
	for _, c := range []struct {
		user, ua string
		plane    bool
	}{
		{"system:kube-controller-manager", "kube-controller-manager/v1.21.0 (linux/amd64) kubernetes/abc", true},
		{"system:serviceaccount:kube-system:disruption-controller", "kube-controller-manager/v1.21.0 (linux/amd64) kubernetes/abc/system:serviceaccount:kube-system:disruption-controller", true},
		{"system:apiserver", "kube-apiserver/v1.21.0 (linux/amd64) kubernetes/abc", true},
		{"alice", "kube-controller-manager/v1.21.0 (linux/amd64) kubernetes/abc", false},
		{"system:serviceaccount:ci:deployer", "helm/v3.14.0", false},
	} {
		msg := messageOf(c.user, c.ua)
		if strings.Contains(msg, plane) != c.plane || strings.Contains(msg, tool) == c.plane {
			t.Errorf("%s (%s): %q", c.user, c.ua, msg)
		}
	}
}
