package weekly_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/auditlens/auditlens/lib/testkit"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/store"
	"github.com/auditlens/auditlens/services/report/weekly"
)

func TestMain(m *testing.M) { chtest.Main(m) }

// Hostile values that must travel through SQL as data.
const (
	sqlUser   = `x'); DROP TABLE findings; -- ? \' \\`
	scriptUA  = `<script>alert(1)</script>`
	quoteUser = `o'brien "the ? user"`
)

type seed struct {
	week weekly.Date // the week reported
	// start of the week reported, and of the week before.
	start, prev time.Time
}

func newSeed() seed {
	// The last full week before the tests' now.
	w := weekly.LastWeekEnding(testkit.Now().UTC())
	start := w.AddDate(0, 0, -6)
	return seed{week: w, start: start, prev: start.AddDate(0, 0, -7)}
}

func f(cluster, rule, id, group, version, resource, removed, user, ua, ns string, at time.Time) *auditlensv1.Finding {
	return &auditlensv1.Finding{
		RuleId: rule, Cluster: cluster, AuditId: id, EventTime: timestamppb.New(at),
		Severity: auditlensv1.Severity_SEVERITY_CRITICAL, Verb: "list",
		ApiGroup: group, ApiVersion: version, Resource: resource, RemovedIn: removed,
		Replacement: "the " + resource + " replacement", Message: "migrate " + resource,
		Username: user, UserAgent: ua, Namespace: ns, Stage: "ResponseComplete",
	}
}

// findings seeds cluster prod (and a decoy cluster) around the week s.week.
func (s seed) findings() []*auditlensv1.Finding {
	h := func(t time.Time, hours int) time.Time { return t.Add(time.Duration(hours) * time.Hour) }
	ing := func(id, user, ua, ns string, at time.Time) *auditlensv1.Finding {
		return f("prod", "removed-api", id, "extensions", "v1beta1", "ingresses", "1.22", user, ua, ns, at)
	}
	psp := func(id, user string, at time.Time) *auditlensv1.Finding {
		return f("prod", "psp", id, "policy", "v1beta1", "podsecuritypolicies", "1.25", user, "kubectl/v1.24.0", "kube-system", at)
	}
	var out []*auditlensv1.Finding
	add := func(fs ...*auditlensv1.Finding) { out = append(out, fs...) }
	// This week: alice 3 ingress findings, each delivered twice or three times.
	for i := 0; i < 3; i++ {
		a := ing(fmt.Sprintf("a%d", i), "alice", "kubectl/v1.20.0", "web", h(s.start, 10+24*i))
		add(a, a)
		if i == 0 {
			add(a)
		}
	}
	// The same audit event may carry several rules: a different rule is a different finding.
	add(f("prod", "deprecated-api", "a0", "extensions", "v1beta1", "ingresses", "", "alice", "kubectl/v1.20.0", "web", h(s.start, 10)))
	// A hostile caller, new this week; its first finding at the first second of the week.
	add(ing("x1", sqlUser, scriptUA, "default", s.start), ing("x2", sqlUser, scriptUA, "default", h(s.start, 50)))
	// bob called last week only: resolved.
	add(ing("b1", "bob", "helm/3.2", "web", h(s.prev, 5)), ing("b2", "bob", "helm/3.2", "web", h(s.prev, 6)))
	// gina's CronJob moved off batch/v1beta1 after the week before: a resolved blocker.
	add(f("prod", "removed-api", "g1", "batch", "v1beta1", "cronjobs", "1.25", "gina", "kubectl/v1.21.0", "jobs", h(s.prev, 40)))
	// carol uses PSP both weeks: not new.
	add(psp("c1", quoteUser, h(s.prev, 30)), psp("c2", quoteUser, h(s.start, 30)), psp("c2", quoteUser, h(s.start, 30)))
	// Removed only in 1.32: blocks 1.32, not 1.25.
	add(f("prod", "removed-api", "fs1", "flowcontrol.apiserver.k8s.io", "v1beta3", "flowschemas", "1.32", "prometheus", "prometheus/2.45", "monitoring", h(s.start, 100)))
	// 1.9 < 1.16 < 1.25 numerically, not as strings.
	add(f("prod", "removed-api", "old1", "extensions", "v1beta1", "networkpolicies", "1.9", "dave", "kubectl/v1.8.0", "net", h(s.start, 20)))
	add(f("prod", "removed-api", "mid1", "extensions", "v1beta1", "daemonsets", "1.16", "erin", "kubectl/v1.15.0", "apps", h(s.start, 21)))
	// Deprecated with no removal: counted, never blocking.
	add(f("prod", "deprecated-api", "d1", "", "v1", "componentstatuses", "", "frank", "curl/8", "", h(s.start, 40)))
	// Outside the week: the first second after it, and two weeks before (within the 30-day TTL).
	add(ing("late", "alice", "kubectl/v1.20.0", "web", s.week.AddDate(0, 0, 1)))
	add(ing("old", "alice", "kubectl/v1.20.0", "web", h(s.prev.AddDate(0, 0, -7), 3)))
	// Another cluster with the same identities: never mixed in.
	add(f("staging", "removed-api", "a0", "extensions", "v1beta1", "ingresses", "1.22", "alice", "kubectl/v1.20.0", "web", h(s.start, 10)))
	return out
}

func TestBuildOnBothEngines(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s := newSeed()
		if err := st.WriteFindings(ctx, s.findings()); err != nil {
			t.Fatal(err)
		}
		build := func(t *testing.T, cluster string, target weekly.Version) *weekly.Report {
			t.Helper()
			r, err := weekly.Build(ctx, st.DB(), weekly.Options{Cluster: cluster, Target: target, WeekEnding: s.week, TrendWeeks: 4})
			if err != nil {
				t.Fatal(err)
			}
			return r
		}

		t.Run("target 1.25", func(t *testing.T) {
			r := build(t, "prod", weekly.Version{Major: 1, Minor: 25})
			// This week: alice 3 + alice deprecated 1 + hostile 2 + carol 1 + fs 1 + dave 1 + erin 1 + frank 1.
			if r.Totals.Findings != 11 {
				t.Errorf("findings %d, want 11", r.Totals.Findings)
			}
			// Blocking 1.25: alice 3, hostile 2, carol 1, dave 1, erin 1.
			if r.Totals.Blocking != 8 {
				t.Errorf("blocking %d, want 8", r.Totals.Blocking)
			}
			if r.Totals.PreviousFindings != 4 || r.Totals.PreviousBlocking != 4 {
				t.Errorf("previous %d/%d, want 4/4", r.Totals.PreviousFindings, r.Totals.PreviousBlocking)
			}
			got := map[string]weekly.Blocker{}
			for _, b := range r.Blockers {
				got[b.API()] = b
			}
			if len(r.Blockers) != 4 {
				t.Fatalf("blockers %v, want ingresses, podsecuritypolicies, networkpolicies, daemonsets", keys(got))
			}
			if r.Blockers[0].Resource != "ingresses" {
				t.Errorf("busiest blocker %s, want ingresses first", r.Blockers[0].API())
			}
			ing := got["extensions/v1beta1 ingresses"]
			if ing.Findings != 5 || len(ing.Callers) != 2 || ing.New || ing.RemovedIn != "1.22" || ing.Replacement != "the ingresses replacement" {
				t.Errorf("ingresses blocker %+v", ing)
			}
			callers := map[string]weekly.Caller{}
			for _, c := range ing.Callers {
				callers[c.Username] = c
			}
			alice, hostile := callers["alice"], callers[sqlUser]
			if alice.Count != 3 || !alice.New || alice.UserAgent != "kubectl/v1.20.0" || alice.Namespace != "web" {
				t.Errorf("alice %+v", alice)
			}
			if !alice.FirstSeen.Equal(s.start.Add(10*time.Hour)) || !alice.LastSeen.Equal(s.start.Add(58*time.Hour)) {
				t.Errorf("alice seen %v..%v", alice.FirstSeen, alice.LastSeen)
			}
			if hostile.Count != 2 || hostile.UserAgent != scriptUA || !hostile.FirstSeen.Equal(s.start) {
				t.Errorf("hostile caller %+v", hostile)
			}
			psp := got["policy/v1beta1 podsecuritypolicies"]
			if psp.Findings != 1 || psp.New || len(psp.Callers) != 1 || psp.Callers[0].Username != quoteUser || psp.Callers[0].New {
				t.Errorf("psp blocker %+v", psp)
			}
			if b := got["extensions/v1beta1 networkpolicies"]; b.RemovedIn != "1.9" || !b.New {
				t.Errorf("removed in 1.9 must block 1.25 and be new: %+v", b)
			}
			if _, ok := got["flowcontrol.apiserver.k8s.io/v1beta3 flowschemas"]; ok {
				t.Error("removed in 1.32 must not block 1.25")
			}
			if _, ok := got["batch/v1beta1 cronjobs"]; ok {
				t.Error("cronjobs had no caller this week: not a blocker")
			}
			if len(r.Resolved) != 2 || r.ResolvedCount != 2 || r.Resolved[0].Username != "bob" || r.Resolved[0].Count != 2 ||
				r.Resolved[1].Username != "gina" || r.Resolved[1].Resource != "cronjobs" {
				t.Errorf("resolved %+v, want bob with 2, then gina", r.Resolved)
			}
			if len(r.New) != 4 || r.NewCount != 4 || r.New[0].Username != "alice" { // alice, hostile, dave, erin
				t.Errorf("new %+v, want 4, alice first", r.New)
			}
			if r.Totals.BlockerCallers != 5 {
				t.Errorf("blocker callers %d, want 5", r.Totals.BlockerCallers)
			}
			var daySum, blockSum uint64
			for _, d := range r.Daily {
				daySum += d.Findings
				blockSum += d.Blocking
			}
			if len(r.Daily) != 7 || daySum != 11 || blockSum != 8 || r.Daily[0].Findings != 5 {
				// Day 0: hostile x1 at 00:00, alice a0 (two rules) at 10:00, dave, erin.
				t.Errorf("daily %+v", r.Daily)
			}
			if len(r.Weekly) != 4 || r.Weekly[3].Findings != 11 || r.Weekly[2].Findings != 4 || r.Weekly[1].Findings != 1 || r.Weekly[0].Findings != 0 {
				t.Errorf("weekly %+v", r.Weekly)
			}
			rules := map[string]weekly.RuleCount{}
			for _, rc := range r.Totals.ByRule {
				rules[rc.RuleID] = rc
			}
			if rules["removed-api"].Findings != 8 || rules["removed-api"].Blocking != 7 || rules["removed-api"].Previous != 3 ||
				rules["psp"].Findings != 1 || rules["deprecated-api"].Findings != 2 || rules["deprecated-api"].Blocking != 0 {
				t.Errorf("by rule %+v", r.Totals.ByRule)
			}
		})

		t.Run("versions compare numerically", func(t *testing.T) {
			r := build(t, "prod", weekly.Version{Major: 1, Minor: 10})
			if len(r.Blockers) != 1 || r.Blockers[0].RemovedIn != "1.9" {
				t.Errorf("target 1.10: blockers %+v, want only the one removed in 1.9", r.Blockers)
			}
			r = build(t, "prod", weekly.Version{Major: 1, Minor: 32})
			if len(r.Blockers) != 5 {
				t.Errorf("target 1.32: %d blockers, want 5", len(r.Blockers))
			}
		})

		t.Run("lists are capped after counting", func(t *testing.T) {
			r, err := weekly.Build(ctx, st.DB(), weekly.Options{Cluster: "prod", Target: weekly.Version{Major: 1, Minor: 25}, WeekEnding: s.week,
				CallersPerBlocker: 1, MaxChanges: 1})
			if err != nil {
				t.Fatal(err)
			}
			b := r.Blockers[0]
			if b.Resource != "ingresses" || len(b.Callers) != 1 || b.CallerCount != 2 || b.Callers[0].Username != "alice" || b.Findings != 5 {
				t.Errorf("ingresses blocker %+v, want alice listed of 2 callers, 5 findings", b)
			}
			if len(r.New) != 1 || r.NewCount != 4 || len(r.Resolved) != 1 || r.ResolvedCount != 2 || r.Totals.BlockerCallers != 5 {
				t.Errorf("new %d/%d resolved %d/%d callers %d", len(r.New), r.NewCount, len(r.Resolved), r.ResolvedCount, r.Totals.BlockerCallers)
			}
		})

		t.Run("hostile cluster name is data", func(t *testing.T) {
			r := build(t, `prod' OR '1'='1`, weekly.Version{Major: 1, Minor: 25})
			if r.Totals.Findings != 0 || len(r.Blockers) != 0 {
				t.Errorf("injected cluster matched: %+v", r.Totals)
			}
		})

		t.Run("ledger", func(t *testing.T) {
			l := weekly.Ledger{DB: st.DB(), Ins: st}
			v := weekly.Version{Major: 1, Minor: 25}
			e, err := l.Latest(ctx, "prod", s.week, v)
			if err != nil || e.Status != "" {
				t.Fatalf("fresh week: %+v %v", e, err)
			}
			at := time.Now().UTC().Truncate(time.Second)
			if err := l.Record(ctx, "prod", s.week, v, []string{"a@example.com"}, weekly.StatusSending, at); err != nil {
				t.Fatal(err)
			}
			if err := l.Record(ctx, "prod", s.week, v, []string{"a@example.com"}, weekly.StatusSent, at); err != nil {
				t.Fatal(err)
			}
			if e, err := l.Latest(ctx, "prod", s.week, v); err != nil || e.Status != weekly.StatusSent || !e.At.Equal(at) {
				t.Fatalf("after sent: %+v %v", e, err)
			}
			for _, other := range []struct {
				c string
				w weekly.Date
				v weekly.Version
			}{{"staging", s.week, v}, {"prod", weekly.Date{Time: s.week.AddDate(0, 0, -7)}, v}, {"prod", s.week, weekly.Version{Major: 1, Minor: 26}}} {
				if e, err := l.Latest(ctx, other.c, other.w, other.v); err != nil || e.Status != "" {
					t.Errorf("%v: %+v %v, want nothing", other, e, err)
				}
			}
		})
	})
}

func keys(m map[string]weekly.Blocker) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
