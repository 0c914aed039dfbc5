package owners_test

import (
	"os"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/services/report/owners"
	"github.com/auditlens/auditlens/services/report/weekly"
)

func TestParseRefusesBadFiles(t *testing.T) {
	for name, c := range map[string]struct{ yaml, want string }{
		"unknown key":  {"schema_version: 1\nteams:\n  - name: web\n    email: [w@example.com]\n    namespace: [web]\n", "owners.yaml:5:5: "},
		"bad address":  {"schema_version: 1\nteams:\n  - name: web\n    email: [\"Web <w@example.com>\"]\n    namespaces: [web]\n", `owners.yaml:4:13: team web: email "Web <w@example.com>"`},
		"owns all":     {"schema_version: 1\nteams:\n  - name: web\n    email: [w@example.com]\n    usernames: [\"*\"]\n", `owners.yaml:5:17: team web: usernames pattern "*" would own every caller`},
		"owns nothing": {"schema_version: 1\nteams:\n  - name: web\n    email: [w@example.com]\n", "owners.yaml:3:9: team web owns nothing"},
		"twice":        {"schema_version: 1\nteams:\n  - name: web\n    email: [w@example.com]\n    namespaces: [a]\n  - name: web\n    email: [w@example.com]\n    namespaces: [b]\n", `owners.yaml:6:11: team "web" defined twice`},
		"bad name":     {"schema_version: 1\nteams:\n  - name: Web Team\n    email: [w@example.com]\n    namespaces: [a]\n", `owners.yaml:3:11: team name "Web Team"`},
		"blank":        {"schema_version: 1\nteams:\n  - name: web\n    email: [w@example.com]\n    namespaces: [\" web\"]\n", `cannot match`},
		"schema":       {"teams: []\n", "schema_version 0"},
		"label key":    {"schema_version: 1\nteams:\n  - name: web\n    email: [w@example.com]\n    namespace_labels: {\"bad key\": web}\n", `label key "bad key" cannot match`},
	} {
		_, err := owners.Parse("owners.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

func example(t *testing.T) *owners.Owners {
	t.Helper()
	b, err := os.ReadFile("../../../examples/owners.yaml")
	if err != nil {
		t.Fatal(err)
	}
	o, err := owners.Parse("examples/owners.yaml", b)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestOwner(t *testing.T) {
	o := example(t)
	for _, c := range []struct{ user, ua, ns, want string }{
		{"system:serviceaccount:web:deployer", "kubectl/v1.20", "db", "web"}, // identity first
		{"alice", "kubectl/v1.20", "web-staging", "web"},
		{"alice", "spark-operator/3.1", "default", "data"},
		{"system:serviceaccount:monitoring:prometheus", "prometheus/2.45", "monitoring", "observability"},
		{"alice", "kubectl/v1.20", "default", ""},
		{"alice", "kubectl/v1.20", "", ""},
		{"system:serviceaccount:webby:x", "curl", "webby", ""},
		// A client chooses its agent: it decides only when neither identity nor namespace does.
		{"mallory", "spark-operator/3.1", "web", "web"},
		{"system:serviceaccount:web:ci", "prometheus/2.45", "default", "web"},
	} {
		if got := o.Owner(c.user, c.ua, c.ns); got != c.want {
			t.Errorf("Owner(%q, %q, %q) = %q, want %q", c.user, c.ua, c.ns, got, c.want)
		}
	}
	labelled, err := owners.Parse("owners.yaml", []byte("schema_version: 1\nteams:\n  - name: shop\n    email: [s@example.com]\n    namespace_labels: {team: shop, tier: web}\n"))
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]map[string]string{"a": {"team": "shop", "tier": "web", "x": "y"}, "b": {"team": "shop"}}
	if labelled.Owner("u", "ua", "a") != "" {
		t.Error("namespace labels matched without a label source")
	}
	labelled = labelled.WithLabels(func(ns string) map[string]string { return labels[ns] })
	if labelled.Owner("u", "ua", "a") != "shop" || labelled.Owner("u", "ua", "b") != "" || labelled.Owner("u", "ua", "c") != "" {
		t.Error("namespace labels: want every label given to match")
	}
	if got := strings.Join(o.TeamNames(), ","); got != "web,data,observability" {
		t.Errorf("TeamNames %s", got)
	}
}

func TestFilter(t *testing.T) {
	o := example(t)
	ing := weekly.Key{RuleID: "removed-api", APIGroup: "extensions", APIVersion: "v1beta1", Resource: "ingresses", RemovedIn: "1.22"}
	psp := weekly.Key{RuleID: "psp", APIGroup: "policy", APIVersion: "v1beta1", Resource: "podsecuritypolicies", RemovedIn: "1.25"}
	r := &weekly.Report{Cluster: "prod", Blockers: []weekly.Blocker{
		{Key: ing, Findings: 9, CallerCount: 3, Message: "alice (etl/2.3) called extensions/v1beta1 ingresses", Callers: []weekly.Caller{
			{Username: "system:serviceaccount:web:deployer", Namespace: "web", Count: 5},
			{Username: "alice", Namespace: "kafka", Count: 3},
			{Username: "bob", Namespace: "default", Count: 1}}},
		{Key: psp, Findings: 2, CallerCount: 1, Callers: []weekly.Caller{{Username: "carol", Namespace: "spark-x", Count: 2}}},
	}, New: []weekly.Change{{Key: ing, Username: "alice", Namespace: "kafka", Count: 3}}, NewCount: 1}
	web := o.Filter(r, "web", 25)
	if len(web.Blockers) != 1 || web.Blockers[0].Findings != 5 || web.Blockers[0].CallerCount != 1 || len(web.New) != 0 {
		t.Errorf("web: %+v", web)
	}
	// The blocker's message names another team's caller: the team's cut does not carry it.
	if m := web.Blockers[0].Message; strings.Contains(m, "alice") || strings.Contains(m, "etl/2.3") || !strings.Contains(m, "extensions/v1beta1 ingresses") {
		t.Errorf("web's cut of the ingresses reads %q: it names another team's caller, or not the API", m)
	}
	data := o.Filter(r, "data", 25)
	if len(data.Blockers) != 2 || data.Blockers[0].Callers[0].Username != "alice" || data.Blockers[1].Findings != 2 || data.NewCount != 1 {
		t.Errorf("data: %+v", data)
	}
	if len(r.Blockers[0].Callers) != 3 {
		t.Error("Filter changed the report it was given")
	}
	mails := o.Split(r, []string{"platform@example.com"}, 2)
	if len(mails) != 3 || mails[0].Name != "platform" || len(mails[0].Report.Blockers[0].Callers) != 2 || mails[1].Name != "web" || mails[2].Name != "data" {
		t.Errorf("split: %d mails %+v", len(mails), mails)
	}
}
