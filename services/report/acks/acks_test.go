package acks_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/services/report/acks"
	"github.com/auditlens/auditlens/services/report/weekly"
)

func TestParseRefusesBadFilesAtLineAndColumn(t *testing.T) {
	for name, c := range map[string]struct{ yaml, want string }{
		"unknown key": {"schema_version: 1\nacknowledgements:\n  - rule: psp\n    reason: r\n    accepted_by: me\n    expiry: 2027-01-01\n",
			"acks.yaml:6:5: "},
		"bad date": {"schema_version: 1\nacknowledgements:\n  - rule: psp\n    reason: r\n    accepted_by: me\n    expires: 2027-02-30\n",
			`acks.yaml:6:14: expires "2027-02-30": want a day YYYY-MM-DD`},
		"rule that matches nothing": {"schema_version: 1\nacknowledgements:\n  - rule: removed-apis\n    reason: r\n    accepted_by: me\n",
			`acks.yaml:3:11: rule "removed-apis" matches no rule id`},
		"api that cannot match": {"schema_version: 1\nacknowledgements:\n  - api: extensions/v1beta1\n    reason: r\n    accepted_by: me\n",
			`acks.yaml:3:10: api "extensions/v1beta1" cannot match`},
		"no pattern": {"schema_version: 1\nacknowledgements:\n  - reason: r\n    accepted_by: me\n",
			"acks.yaml:3:11: acknowledgement 1 names neither rule nor api"},
		"no reason": {"schema_version: 1\nacknowledgements:\n  - rule: psp\n    accepted_by: me\n",
			"acks.yaml:3:9: acknowledgement 1 has no reason"},
		// The client chooses its user agent: alone, it would accept anyone who sends it.
		"user agent alone": {"schema_version: 1\nacknowledgements:\n  - rule: psp\n    user_agent: vendor-agent/*\n    reason: r\n    accepted_by: me\n",
			`acks.yaml:4:17: user_agent "vendor-agent/*" without a username`},
		"user agent with any user": {"schema_version: 1\nacknowledgements:\n  - rule: psp\n    username: '**'\n    user_agent: vendor-agent/*\n    reason: r\n    accepted_by: me\n",
			`acks.yaml:5:17: user_agent "vendor-agent/*" without a username`},
		"schema":     {"schema_version: 2\n", "acks.yaml:1:17: schema_version 2"},
		"syntax":     {"schema_version: 1\nacknowledgements:\n  - rule: [psp\n", "acks.yaml:3:"},
		"wrong type": {"schema_version: 1\nacknowledgements:\n  rule: psp\n", "acks.yaml:3:"},
	} {
		_, err := acks.Parse("acks.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

func TestExampleParses(t *testing.T) {
	b, err := os.ReadFile("../../../examples/acknowledgements.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := acks.Parse("examples/acknowledgements.yaml", b)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Acks) != 2 || s.Acks[0].Source != "examples/acknowledgements.yaml:10" {
		t.Errorf("%+v", s.Acks)
	}
}

func TestPattern(t *testing.T) {
	for _, c := range []struct {
		p, s string
		want bool
	}{
		{"", "anything", true}, {"psp", "psp", true}, {"psp", "pspx", false}, {"*", "", true},
		{"system:serviceaccount:team-a:*", "system:serviceaccount:team-a:deployer", true},
		{"system:serviceaccount:team-a:*", "system:serviceaccount:team-ab:deployer", false},
		{"*/v1beta1 *", "extensions/v1beta1 ingresses", true}, {"a*b*c", "abc", true}, {"a*b*c", "acb", false},
		{"a*a", "a", false}, {"helm/*", "helm/3.2", true},
	} {
		if got := acks.Pattern(c.p).Match(c.s); got != c.want {
			t.Errorf("%q.Match(%q) = %t", c.p, c.s, got)
		}
	}
}

// TestAcceptUntilExpiry: an accepted blocker does not block until the end of its expires day,
// and blocks again, flagged, after it.
func TestAcceptUntilExpiry(t *testing.T) {
	s, err := acks.Parse("acks.yaml", []byte(`schema_version: 1
acknowledgements:
  - cluster: prod
    rule: psp
    reason: legacy tenant
    accepted_by: jane@example.com
    expires: 2026-12-31
  - rule: removed-api
    api: extensions/v1beta1 ingresses
    username: "system:serviceaccount:web:*"
    reason: web team migrates in January
    accepted_by: web@example.com
    expires: 2027-01-15
`))
	if err != nil {
		t.Fatal(err)
	}
	psp := weekly.Blocker{Key: weekly.Key{RuleID: "psp", APIGroup: "policy", APIVersion: "v1beta1", Resource: "podsecuritypolicies", RemovedIn: "1.25"}}
	ing := func(users ...string) weekly.Blocker {
		b := weekly.Blocker{Key: weekly.Key{RuleID: "removed-api", APIGroup: "extensions", APIVersion: "v1beta1", Resource: "ingresses", RemovedIn: "1.22"}}
		for _, u := range users {
			b.Callers = append(b.Callers, weekly.Caller{Username: u})
		}
		b.CallerCount = len(users)
		return b
	}
	bs := []weekly.Blocker{psp, ing("system:serviceaccount:web:deployer"), ing("system:serviceaccount:web:a", "alice")}
	for _, c := range []struct {
		at       time.Time
		cluster  string
		blocking []string // rule or user of each blocker still blocking
		expired  int
	}{
		{time.Date(2026, 12, 31, 23, 59, 59, 0, time.UTC), "prod", []string{"alice"}, 0},
		{time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), "prod", []string{"psp", "alice"}, 1},
		{time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), "staging", []string{"psp", "alice"}, 0},
		{time.Date(2027, 1, 16, 0, 0, 0, 0, time.UTC), "prod", []string{"psp", "system:serviceaccount:web:deployer", "alice"}, 2},
	} {
		blocking, accepted := weekly.Split(bs, s.For(c.cluster), c.at)
		var got []string
		expired := 0
		for _, b := range blocking {
			n := b.RuleID
			if len(b.Callers) > 0 {
				n = b.Callers[len(b.Callers)-1].Username
			}
			got = append(got, n)
			if b.Expired != nil {
				expired++
			}
		}
		if strings.Join(got, ",") != strings.Join(c.blocking, ",") || expired != c.expired || len(accepted)+len(blocking) != len(bs) {
			t.Errorf("%s at %s: blocking %v (%d expired), want %v (%d expired)", c.cluster, c.at, got, expired, c.blocking, c.expired)
		}
	}
	// A blocker with callers beyond its list is not accepted by a caller pattern.
	b := ing("system:serviceaccount:web:deployer")
	b.CallerCount = 2
	if _, ok := s.For("prod").Accept(b); ok {
		t.Error("accepted a blocker whose unlisted callers are unknown")
	}
}
