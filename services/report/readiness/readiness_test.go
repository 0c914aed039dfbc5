package readiness_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/auditlens/auditlens/lib/testkit"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/access"
	"github.com/auditlens/auditlens/services/report/acks"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/console"
	"github.com/auditlens/auditlens/services/report/readiness"
	"github.com/auditlens/auditlens/services/report/store"
	"github.com/auditlens/auditlens/services/report/weekly"
)

func TestMain(m *testing.M) { chtest.Main(m) }

func f(cluster, rule, id, group, version, resource, removed, user, ua, ns string, at time.Time) *auditlensv1.Finding {
	return &auditlensv1.Finding{
		RuleId: rule, Cluster: cluster, AuditId: id, EventTime: timestamppb.New(at),
		Severity: auditlensv1.Severity_SEVERITY_CRITICAL, Verb: "list",
		ApiGroup: group, ApiVersion: version, Resource: resource, RemovedIn: removed,
		Replacement: "the " + resource + " replacement", Message: "migrate " + resource,
		Username: user, UserAgent: ua, Namespace: ns, Stage: "ResponseComplete",
	}
}

// seed is a week of three clusters: prod (alive, blockers of 1.22 and 1.25, one of 1.32 only),
// clean (alive, deprecations only) and quiet (one deprecation, then silence).
type seed struct {
	week       weekly.Date
	start, end time.Time
}

func newSeed() seed {
	w := weekly.LastWeekEnding(testkit.Now().UTC())
	end := w.AddDate(0, 0, 1)
	return seed{week: w, start: end.AddDate(0, 0, -7), end: end}
}

func (s seed) findings() []*auditlensv1.Finding {
	var out []*auditlensv1.Finding
	add := func(fs ...*auditlensv1.Finding) { out = append(out, fs...) }
	// A deprecation every 50 minutes keeps prod's and clean's streams alive.
	for i, at := 0, s.start; at.Before(s.end); i, at = i+1, at.Add(50*time.Minute) {
		for _, c := range []string{"prod", "clean"} {
			add(f(c, "deprecated-api", fmt.Sprintf("d%d", i), "", "v1", "componentstatuses", "", "prober", "curl/8", "", at))
		}
	}
	ing := func(id, user, ns string, at time.Time) *auditlensv1.Finding {
		return f("prod", "removed-api", id, "extensions", "v1beta1", "ingresses", "1.22", user, "kubectl/v1.20.0", ns, at)
	}
	for i := 0; i < 5; i++ {
		a := ing(fmt.Sprintf("i%d", i), "alice", "web", s.start.Add(time.Duration(10+24*i)*time.Hour))
		add(a, a) // redelivered: counted once
	}
	add(ing("x1", `x'); DROP TABLE findings; --`, "default", s.start.Add(3*time.Hour)))
	add(f("prod", "psp", "p1", "policy", "v1beta1", "podsecuritypolicies", "1.25", "carol", "kubectl/v1.24.0", "kube-system", s.start.Add(30*time.Hour)))
	add(f("prod", "removed-api", "fs1", "flowcontrol.apiserver.k8s.io", "v1beta3", "flowschemas", "1.32", "prometheus", "prometheus/2.45", "monitoring", s.start.Add(100*time.Hour)))
	// Before the window: never a blocker of this week.
	add(ing("old", "bob", "web", s.start.Add(-time.Hour)))
	add(f("quiet", "deprecated-api", "q1", "", "v1", "componentstatuses", "", "prober", "curl/8", "", s.start.Add(2*time.Hour)))
	return out
}

// eventMinutes are classify's heartbeats: migrated (all clients migrated: events every 30
// minutes through the week, never a finding), stalled (events on the first day only) and
// fresh (installed 3 hours before the week's end: events every 30 minutes since).
func (s seed) eventMinutes() []store.EventMinute {
	var out []store.EventMinute
	for at := s.start; at.Before(s.end); at = at.Add(30 * time.Minute) {
		out = append(out, store.EventMinute{Cluster: "migrated", Minute: at, Events: 40})
		if at.Before(s.start.Add(24 * time.Hour)) {
			out = append(out, store.EventMinute{Cluster: "stalled", Minute: at, Events: 3})
		}
		if !at.Before(s.end.Add(-3 * time.Hour)) {
			out = append(out, store.EventMinute{Cluster: "fresh", Minute: at, Events: 7})
		}
	}
	return out
}

// write stores the seed's findings and heartbeat minutes in st.
func (s seed) write(ctx context.Context, t *testing.T, st *store.Store) {
	t.Helper()
	if err := st.WriteFindings(ctx, s.findings()); err != nil {
		t.Fatal(err)
	}
	if err := st.WriteEventMinutes(ctx, s.eventMinutes()); err != nil {
		t.Fatal(err)
	}
}

// openStore wraps a store for readiness.Main without closing it.
type openStore struct{ *store.Store }

func (openStore) Close() error { return nil }

func TestGateAgreesWithWeeklyOnBothEngines(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s := newSeed()
		s.write(ctx, t, st)
		now := func() time.Time { return s.end.Add(-time.Second) }
		for _, target := range []weekly.Version{{Major: 1, Minor: 22}, {Major: 1, Minor: 25}, {Major: 1, Minor: 32}} {
			rep, err := weekly.Build(ctx, st.DB(), weekly.Options{Cluster: "prod", Target: target, WeekEnding: s.week, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			g, err := readiness.Evaluate(ctx, st.DB(), readiness.Options{Cluster: "prod", Target: target, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			if !g.WindowStart.Equal(rep.WeekStart) || !g.WindowEnd.Equal(rep.WeekEnd) {
				t.Fatalf("gate window %s..%s, weekly %s..%s", g.WindowStart, g.WindowEnd, rep.WeekStart, rep.WeekEnd)
			}
			if len(rep.Blockers) == 0 {
				t.Fatalf("target %s: the weekly report has no blockers: the comparison proves nothing", target)
			}
			if !reflect.DeepEqual(g.Blockers, rep.Blockers) {
				t.Errorf("target %s: the gate's blockers differ from the weekly report's:\n gate %+v\nweekly %+v", target, g.Blockers, rep.Blockers)
			}
			if g.State != readiness.Blocked || g.Reason != readiness.ReasonBlockers || g.Ready || !g.Stream.Alive {
				t.Errorf("target %s: %s/%s ready=%t alive=%t, want blocked with a live stream", target, g.State, g.Reason, g.Ready, g.Stream.Alive)
			}
			want := map[string]int{"1.22": 1, "1.25": 2, "1.32": 3}[target.String()]
			if len(g.Blockers) != want {
				t.Errorf("target %s: %d blockers, want %d", target, len(g.Blockers), want)
			}
		}
		// The ingresses: 5 findings (each stored twice) + the hostile one, last used on day 5.
		g, err := readiness.Evaluate(ctx, st.DB(), readiness.Options{Cluster: "prod", Target: weekly.Version{Major: 1, Minor: 22}, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		b := g.Blockers[0]
		if b.Findings != 6 || b.CallerCount != 2 || !b.LastSeen.Equal(s.start.Add(106*time.Hour)) {
			t.Errorf("ingresses: %d findings, %d callers, last %s; want 6, 2, %s", b.Findings, b.CallerCount, b.LastSeen, s.start.Add(106*time.Hour))
		}

		for _, c := range []struct {
			cluster, state, reason string
			code                   int
		}{
			{"prod", readiness.Blocked, readiness.ReasonBlockers, readiness.ExitBlocked},
			{"clean", readiness.Ready, readiness.ReasonNoBlockers, readiness.ExitReady},
			{"quiet", readiness.Unknown, readiness.ReasonStreamSilent, readiness.ExitUnknown},
			{"migrated", readiness.Ready, readiness.ReasonNoBlockers, readiness.ExitReady},
			{"stalled", readiness.Unknown, readiness.ReasonStreamSilent, readiness.ExitUnknown},
			// Judged from its first event, 3 hours back, not from the week before it existed.
			{"fresh", readiness.Ready, readiness.ReasonNoBlockers, readiness.ExitReady},
			// A name never seen: unknown for the gate, an error naming the known clusters for
			// the command.
			{"never-seen", readiness.Unknown, readiness.ReasonStreamSilent, readiness.ExitError},
		} {
			g, err := readiness.Evaluate(ctx, st.DB(), readiness.Options{Cluster: c.cluster, Target: weekly.Version{Major: 1, Minor: 34}, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			if g.State != c.state || g.Reason != c.reason || g.Ready != (c.state == readiness.Ready) {
				t.Errorf("%s: %s/%s (%s), want %s/%s", c.cluster, g.State, g.Reason, g.Message, c.state, c.reason)
			}
			if c.cluster == "quiet" && (g.Stream.ActiveMinutes != 1 || time.Duration(g.Stream.LongestSilence) < 6*24*time.Hour) {
				t.Errorf("quiet: %+v, want one active minute and a silence of almost the whole week", g.Stream)
			}
			if c.cluster == "migrated" && (g.Stream.ActiveMinutes != 7*24*2 || time.Duration(g.Stream.LongestSilence) != 29*time.Minute) {
				t.Errorf("migrated: %+v, want %d active minutes (its heartbeats) and silences of 29m", g.Stream, 7*24*2)
			}
			if c.cluster == "stalled" && !strings.Contains(g.Message, "no events from cluster stalled") {
				t.Errorf("stalled: message %q", g.Message)
			}
			if c.cluster == "fresh" && (!g.Stream.FirstEvent.Equal(s.end.Add(-3*time.Hour)) || time.Duration(g.Stream.LongestSilence) != 29*time.Minute) {
				t.Errorf("fresh: %+v, want the first event 3h before the end and silences of 29m", g.Stream)
			}
			if c.cluster == "never-seen" && (!g.Stream.FirstEvent.IsZero() || !strings.Contains(g.Message, "has ever been stored")) {
				t.Errorf("never-seen: %+v, message %q", g.Stream, g.Message)
			}
			if c.cluster == "clean" && time.Duration(g.Stream.LongestSilence) > 50*time.Minute {
				t.Errorf("clean: longest silence %s, want at most 50m", time.Duration(g.Stream.LongestSilence))
			}
			// The command's exit code, on the same store, with the window ending at the
			// seed's end as above (on the wall clock the week's end was up to 7 days back).
			var out, errb bytes.Buffer
			code := readiness.Main([]string{"--cluster", c.cluster, "--target-version", "1.34", "--readiness-window", "336h",
				"--readiness-max-silence", "240h", "--format", "json"}, &out, &errb,
				readiness.Engine{Open: func(context.Context) (readiness.Store, error) { return openStore{st}, nil }, Now: now}, nil, nil)
			wantCode := c.code
			if c.cluster == "quiet" || c.cluster == "stalled" {
				wantCode = readiness.ExitReady // 240h of silence allowed: quiet's one finding is enough
			}
			if code != wantCode {
				t.Errorf("report readiness --cluster %s: exit %d, want %d; stderr %s", c.cluster, code, wantCode, errb.String())
			}
			if c.cluster == "never-seen" && !strings.Contains(errb.String(), "the clusters with events: clean, fresh, migrated, prod, quiet, stalled") {
				t.Errorf("report readiness --cluster never-seen: stderr %q, want the known clusters named", errb.String())
			}
			if code != readiness.ExitError {
				var r readiness.Result
				if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.Cluster != c.cluster {
					t.Errorf("report readiness --format json: %v, %q", err, out.String())
				}
			}
		}

		// Accepted risks, with a clock: the ingresses (the only blocker of 1.22) accepted
		// until the last day of the week: ready until then (the stream is alive), blocked and
		// flagged after it.
		set, err := acks.Parse("acks.yaml", []byte(fmt.Sprintf(`schema_version: 1
acknowledgements:
  - cluster: prod
    api: extensions/v1beta1 ingresses
    reason: the web team migrates next week
    accepted_by: web@example.com
    expires: %s
  - rule: psp
    reason: never used here
    accepted_by: nobody@example.com
`, s.week)))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			at      time.Time
			state   string
			expired bool
		}{
			{s.end.Add(-time.Second), readiness.Ready, false},
			{s.end.Add(time.Hour), readiness.Blocked, true},
		} {
			g, err := readiness.Evaluate(ctx, st.DB(), readiness.Options{Cluster: "prod", Target: weekly.Version{Major: 1, Minor: 22},
				Acceptor: set.For("prod"), Now: func() time.Time { return c.at }})
			if err != nil {
				t.Fatal(err)
			}
			if g.State != c.state || (len(g.Blockers) == 1 && (g.Blockers[0].Expired != nil) != c.expired) {
				t.Errorf("at %s: %s with %d blocker(s), %d accepted; want %s (expired flagged: %t)", c.at, g.State, len(g.Blockers), len(g.Accepted), c.state, c.expired)
			}
			if c.state == readiness.Ready && (len(g.Accepted) != 1 || g.Accepted[0].Acceptance.Source != "acks.yaml:3" || !strings.Contains(g.Message, "1 accepted risk")) {
				t.Errorf("at %s: accepted %+v, message %q; want the ingresses named, accepted by acks.yaml:3", c.at, g.Accepted, g.Message)
			}
		}
		// Review: the PSP acknowledgement has no expiry, and matched nothing in 30 days in
		// cluster clean; the ingresses one expired after the week.
		ns, err := set.Review(ctx, st.DB(), "clean", s.end)
		if err != nil {
			t.Fatal(err)
		}
		if len(ns) != 2 || ns[0].Source != "acks.yaml:8" || !strings.Contains(ns[0].Message, "no expiry") || !strings.Contains(ns[1].Message, "matched nothing in the last 30 days") {
			t.Errorf("review of clean: %+v", ns)
		}
		ns, err = set.Review(ctx, st.DB(), "prod", s.end.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		var msgs []string
		for _, n := range ns {
			msgs = append(msgs, n.Source+" "+n.Message)
		}
		if got := strings.Join(msgs, "; "); !strings.Contains(got, "acks.yaml:3 expired on "+s.week.String()) ||
			strings.Contains(got, "acks.yaml:3 matched nothing") || !strings.Contains(got, "acks.yaml:8 has no expiry") || strings.Contains(got, "acks.yaml:8 matched nothing") {
			t.Errorf("review of prod: %s; want the ingresses one expired (and used), the PSP one without expiry (and used)", got)
		}

		// The gate in the service: metrics and the HTTP API.
		reg := prometheus.NewRegistry()
		cfg := readiness.DefaultConfig()
		cfg.Clusters = readiness.List{"never-seen"}
		cfg.Targets = readiness.Versions{{Major: 1, Minor: 25}}
		gate, err := readiness.NewGate(cfg, st.DB(), weekly.Version{}, nil, nil, nil, reg)
		if err != nil {
			t.Fatal(err)
		}
		readiness.SetClock(gate, now)
		rs, err := gate.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != 7 {
			t.Errorf("judged %d cluster(s), want never-seen, clean, fresh, migrated (events only), prod, quiet, stalled", len(rs))
		}
		if got := testutil.ToFloat64(readinessMetric(reg, "auditlens_upgrade_blockers", "prod", "1.25", "")); got != 2 {
			t.Errorf("auditlens_upgrade_blockers{prod,1.25} = %v, want 2", got)
		}
		for cl, state := range map[string]string{"prod": "blocked", "clean": "ready", "quiet": "unknown", "never-seen": "unknown", "migrated": "ready", "stalled": "unknown", "fresh": "ready"} {
			if got := testutil.ToFloat64(readinessMetric(reg, "auditlens_upgrade_readiness", cl, "1.25", state)); got != 1 {
				t.Errorf("auditlens_upgrade_readiness{%s,1.25,%s} = %v, want 1", cl, state, got)
			}
		}
		srv := httptest.NewServer(access.Loopback(gate.Handler())) // as the console serves it
		defer srv.Close()
		for q, want := range map[string]int{
			"?cluster=prod&target_version=1.22": 200, "?cluster=clean": 200,
			"?cluster=prod&target_version=banana": 400, "": 400,
		} {
			resp, err := http.Get(srv.URL + q)
			if err != nil {
				t.Fatal(err)
			}
			var r readiness.Result
			_ = json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("GET %s: %d, want %d", q, resp.StatusCode, want)
			}
			if q == "?cluster=prod&target_version=1.22" && (r.State != readiness.Blocked || len(r.Blockers) != 1 || r.Blockers[0].Resource != "ingresses") {
				t.Errorf("GET %s: %+v, want blocked by the ingresses", q, r)
			}
			if q == "?cluster=clean" && r.State != readiness.Ready {
				t.Errorf("GET %s: %s, want ready (target 1.25 by default)", q, r.State)
			}
		}

		// The command, while a running auditlens holds the embedded store: it asks that
		// process's console and exits on its judgement; a server store is never asked for.
		held := func(embedded bool) readiness.Engine {
			return readiness.Engine{Open: func(context.Context) (readiness.Store, error) {
				return nil, errors.New("Cannot lock file status. Another server instance in same directory is already running")
			}, Embedded: func() bool { return embedded }, Now: now}
		}
		var out, errb bytes.Buffer
		code := readiness.Main([]string{"--cluster", "prod", "--target-version", "1.22", "--format", "json", "--readiness-console", srv.URL},
			&out, &errb, held(true), nil, nil)
		var r readiness.Result
		if err := json.Unmarshal(out.Bytes(), &r); code != readiness.ExitBlocked || err != nil || len(r.Blockers) != 1 || r.Blockers[0].Resource != "ingresses" ||
			!strings.Contains(errb.String(), "held by a running auditlens") {
			t.Errorf("report readiness, store held: exit %d, %v, %+v; stderr %s", code, err, r, errb.String())
		}
		errb.Reset()
		if code := readiness.Main([]string{"--cluster", "prod", "--target-version", "1.22", "--readiness-console", srv.URL}, io.Discard, &errb, held(false), nil, nil); code != readiness.ExitError || strings.Contains(errb.String(), "running auditlens") {
			t.Errorf("report readiness, server store down: exit %d, stderr %s; want 1 without asking a console", code, errb.String())
		}
	})
}

// readinessMetric finds one gauge of reg's by name and labels.
func readinessMetric(reg *prometheus.Registry, name, cluster, target, state string) prometheus.Collector {
	return collectorFunc(func(ch chan<- prometheus.Metric) {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				l := map[string]string{}
				for _, p := range m.GetLabel() {
					l[p.GetName()] = p.GetValue()
				}
				if l["cluster"] == cluster && l["target_version"] == target && l["state"] == state {
					ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, "", nil, nil), prometheus.GaugeValue, m.GetGauge().GetValue())
				}
			}
		}
	})
}

type collectorFunc func(ch chan<- prometheus.Metric)

func (f collectorFunc) Describe(chan<- *prometheus.Desc)    {}
func (f collectorFunc) Collect(ch chan<- prometheus.Metric) { f(ch) }

// The cluster's release, named by its apiserver's agent (classify's heartbeats), splits the
// blockers: what the upgrade breaks first, then what fails already. The gate and the weekly
// report agree on both lists, on both engines.
func TestFailingNowApartOnBothEngines(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		// prod's apiserver said 1.29 on the first day and 1.30 since (it was upgraded).
		ctx, s := seedReleases(t, st, "kube-apiserver 1.29 2h", "kube-apiserver 1.30 50h", "kube-scheduler 1.29 60h")
		now := func() time.Time { return s.end.Add(-time.Second) }
		target := weekly.Version{Major: 1, Minor: 32}
		g, rep := gateAgreesWithWeekly(ctx, t, st, "prod", target, s.week, now, false,
			"+flowcontrol.apiserver.k8s.io/v1beta3 flowschemas !extensions/v1beta1 ingresses !policy/v1beta1 podsecuritypolicies ")
		if g.Current.String() != "1.30" || rep.Current.String() != "1.30" || !strings.Contains(g.CurrentWhy, "kube-apiserver") ||
			g.NewBlockers != 1 || g.FailingNow != 2 {
			t.Errorf("gate: current %s (%s), weekly %s, new %d, failing %d", g.Current, g.CurrentWhy, rep.Current, g.NewBlockers, g.FailingNow)
		}
		wantMsg := "3 blocker(s) of 1.32 in use: 1 removed after 1.30, the cluster's release: 1.31 needs nothing, 1.32 removes 1 (flowcontrol.apiserver.k8s.io/v1beta3 flowschemas); " +
			"2 failing now, removed at or before 1.30: extensions/v1beta1 ingresses, policy/v1beta1 podsecuritypolicies"
		if g.Message != wantMsg {
			t.Errorf("message %q\n   want %q", g.Message, wantMsg)
		}
		// Before the upgrade to 1.30 the apiserver said 1.29: judged then, the same blockers
		// read the same way (1.22 and 1.25 failed already).
		early := func() time.Time { return s.start.Add(10 * time.Hour) }
		g, err := readiness.Evaluate(ctx, st.DB(), readiness.Options{Cluster: "prod", Target: target, Now: early, Window: 10 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if g.Current.String() != "1.29" {
			t.Errorf("judged on the first day: current %s (%s), want 1.29", g.Current, g.CurrentWhy)
		}
	})
}

// An upgrade that skips releases: what each hop removes, in order, on both engines.
func TestHopsOnBothEngines(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		// prod runs 1.29; the seed's blockers are removed in 1.22, 1.25 (failing now) and 1.32.
		ctx, s := seedReleases(t, st, "kube-apiserver 1.29 2h")
		now := func() time.Time { return s.end.Add(-time.Second) }
		g, err := readiness.Evaluate(ctx, st.DB(), readiness.Options{Cluster: "prod", Target: weekly.Version{Major: 1, Minor: 32}, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, h := range g.Hops {
			got += h.Release.String() + ":" + strings.Join(h.Blockers, ",") + " "
		}
		if want := "1.30: 1.31: 1.32:flowcontrol.apiserver.k8s.io/v1beta3 flowschemas "; got != want {
			t.Errorf("hops %q, want %q", got, want)
		}
		if want := "1 removed after 1.29, the cluster's release: 1.30 needs nothing, 1.31 needs nothing, 1.32 removes 1 (flowcontrol.apiserver.k8s.io/v1beta3 flowschemas)"; !strings.Contains(g.Message, want) {
			t.Errorf("message %q lacks %q", g.Message, want)
		}
		var text bytes.Buffer
		if err := readiness.Write(&text, "text", g); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"hop to 1.30: nothing\nhop to 1.31: nothing\nhop to 1.32: flowcontrol.apiserver.k8s.io/v1beta3 flowschemas\n",
			"blocker of 1.32: flowcontrol.apiserver.k8s.io/v1beta3 flowschemas", "failing now: extensions/v1beta1 ingresses"} {
			if !strings.Contains(text.String(), want) {
				t.Errorf("text lacks %q:\n%s", want, text.String())
			}
		}
		// One step: no hops.
		g, err = readiness.Evaluate(ctx, st.DB(), readiness.Options{Cluster: "prod", Target: weekly.Version{Major: 1, Minor: 30}, Now: now})
		if err != nil || len(g.Hops) != 0 {
			t.Errorf("one step: hops %v (%v)", g.Hops, err)
		}
	})
}

// seedReleases writes the seed, and the control plane's sightings of prod, each
// "component X.Y hours-after-the-week's-start" ("kube-apiserver 1.30 50h").
func seedReleases(t *testing.T, st *store.Store, sightings ...string) (context.Context, seed) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	s := newSeed()
	s.write(ctx, t, st)
	var ss []store.ControlPlaneSighting
	for _, x := range sightings {
		var component, release, hours string
		if _, err := fmt.Sscan(x, &component, &release, &hours); err != nil {
			t.Fatalf("sighting %q: %v", x, err)
		}
		v, err := weekly.ParseVersion(release)
		after, err2 := time.ParseDuration(hours)
		if err != nil || err2 != nil {
			t.Fatalf("sighting %q: %v %v", x, err, err2)
		}
		ss = append(ss, store.ControlPlaneSighting{Cluster: "prod", Component: component, Version: v, Seen: s.start.Add(after)})
	}
	if err := st.WriteControlPlaneSightings(ctx, ss); err != nil {
		t.Fatal(err)
	}
	return ctx, s
}

// Without --target-version the command judges the release after the cluster's (read from
// the store, or --current-version); a cluster whose release is unknown needs the flag.
func TestCommandDefaultTarget(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		_, s := seedReleases(t, st, "kube-apiserver 1.31 2h")
		now := func() time.Time { return s.end.Add(-time.Second) }
		eng := readiness.Engine{Open: func(context.Context) (readiness.Store, error) { return openStore{st}, nil }, Now: now}
		for _, c := range []struct {
			args       []string
			code       int
			target     string
			stderrPart string
		}{
			// prod runs 1.31: 1.32 removes flowschemas v1beta3, the seed's blocker of 1.32.
			{[]string{"--cluster", "prod"}, readiness.ExitBlocked, "1.32", "target 1.32, the release after the cluster's 1.31 (the kube-apiserver"},
			{[]string{"--cluster", "prod", "--current-version", "1.32"}, readiness.ExitBlocked, "1.33", ""},
			{[]string{"--cluster", "clean"}, readiness.ExitUsage, "", `--target-version is required: the release of cluster "clean" is unknown`},
			{[]string{"--cluster", "prod", "--current-version", "1.32", "--target-version", "1.32"}, readiness.ExitUsage, "", "is not after --current-version 1.32"},
		} {
			var out, errb bytes.Buffer
			code := readiness.Main(append(c.args, "--format", "json"), &out, &errb, eng, nil, nil)
			if code != c.code || !strings.Contains(errb.String(), c.stderrPart) {
				t.Errorf("%v: exit %d, want %d; stderr %q, want %q", c.args, code, c.code, errb.String(), c.stderrPart)
				continue
			}
			if c.target != "" {
				var r readiness.Result
				if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.Target.String() != c.target {
					t.Errorf("%v: target %s (%v), want %s", c.args, r.Target, err, c.target)
				}
			}
		}
	})
}

// The new rule families block as the API rules do: by the release that stops supporting what
// they name (a kube-proxy 1.34 at 1.38, a kubelet 1.33 at 1.37 and gitRepo volumes at 1.33:
// failing now on a 1.37 cluster), and never for a deprecation or a check tied to no release
// (externalIPs, an old kubectl, a drain a PodDisruptionBudget refused).
func TestGateBlocksOnSkewAndRemovedBehaviour(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s := newSeed()
		at := func(h int) time.Time { return s.start.Add(time.Duration(h) * time.Hour) }
		fs := []*auditlensv1.Finding{
			f("fleet", "version-skew", "sk1", "", "", "kube-proxy 1.34", "1.38", "system:kube-proxy", "kube-proxy/v1.34.1", "", at(5)),
			f("fleet", "version-skew", "sk2", "", "", "kubelet 1.33", "1.37", "system:node:node-old", "kubelet/v1.33.4", "", at(6)),
			f("fleet", "gitrepo-volume", "g1", "", "v1", "pods", "1.33", "admin", "kubectl/v1.37.1", "families", at(7)),
			f("fleet", "service-external-ips", "e1", "", "v1", "services", "", "admin", "kubectl/v1.37.1", "families", at(8)),
			f("fleet", "kubectl-version-skew", "k1", "", "", "kubectl 1.35", "", "alice", "kubectl/v1.35.0", "", at(9)),
			f("fleet", "eviction-blocked", "ev1", "", "v1", "pods", "", "drainer", "kubectl/v1.37.1", "families", at(10)),
		}
		for i, at := 0, s.start; at.Before(s.end); i, at = i+1, at.Add(50*time.Minute) {
			// A live stream: the gate judges it, not "unknown".
			fs = append(fs, f("fleet", "deprecated-api", fmt.Sprintf("d%d", i), "", "v1", "componentstatuses", "", "prober", "curl/8", "", at))
		}
		if err := st.WriteFindings(ctx, fs); err != nil {
			t.Fatal(err)
		}
		if err := st.WriteControlPlaneSightings(ctx, []store.ControlPlaneSighting{
			{Cluster: "fleet", Component: "kube-apiserver", Version: weekly.Version{Major: 1, Minor: 37}, Seen: at(1)}}); err != nil {
			t.Fatal(err)
		}
		// Its writes arrived with their bodies (the gitRepo and externalIPs findings say so):
		// the verdict rests on every rule.
		if err := st.WriteCoverageSightings(ctx, []store.CoverageSighting{
			{Cluster: "fleet", Input: "webhook", Level: "Request", Writes: "body", Seen: at(7)},
			{Cluster: "fleet", Input: "webhook", Level: "Metadata", Seen: at(8)},
		}); err != nil {
			t.Fatal(err)
		}
		now := func() time.Time { return s.end.Add(-time.Second) }
		target := weekly.Version{Major: 1, Minor: 38}
		g, _ := gateAgreesWithWeekly(ctx, t, st, "fleet", target, s.week, now, true,
			"+version-skew kube-proxy 1.34 !version-skew kubelet 1.33 !gitrepo-volume v1 pods ")
		if g.Ready || g.NewBlockers != 1 || g.FailingNow != 2 {
			t.Errorf("gate: ready %v, new %d, failing now %d: %s", g.Ready, g.NewBlockers, g.FailingNow, g.Message)
		}
		if want := "version-skew kube-proxy 1.34"; !strings.Contains(g.Message, want) || strings.Contains(g.Message, "not checked") {
			t.Errorf("message %q lacks %q (or says something was not checked)", g.Message, want)
		}
		if c := g.Coverage; !c.Known || strings.Join(c.Inputs, ",") != "webhook" || strings.Join(c.Levels, ",") != "Metadata,Request" || c.Bodies != "seen" {
			t.Errorf("coverage %+v", c)
		}
		// Judged against 1.36 (a target before the cluster's, but a target like any): the
		// kube-proxy and the kubelet are supported, the gitRepo volumes fail, the
		// deprecations still block nothing.
		g, err := readiness.Evaluate(ctx, st.DB(), readiness.Options{Cluster: "fleet", Target: weekly.Version{Major: 1, Minor: 36}, Now: now})
		if err != nil || len(g.Blockers) != 1 || !strings.Contains(g.Message, "gitrepo-volume v1 pods") {
			t.Errorf("target 1.36: %d blockers (%v): %s", len(g.Blockers), err, g.Message)
		}
	})
}

// A stream of Metadata-level events only: the verdict, ready or blocked, names the rules it
// could not check; the text and JSON results carry the coverage.
func TestVerdictNamesUncheckedRules(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s := newSeed()
		s.write(ctx, t, st)
		if err := st.WriteCoverageSightings(ctx, []store.CoverageSighting{
			{Cluster: "clean", Input: "file", Level: "Metadata", Seen: s.start.Add(time.Hour)},
			{Cluster: "clean", Input: "file", Level: "Metadata", Writes: "no-body", Seen: s.start.Add(2 * time.Hour)},
		}); err != nil {
			t.Fatal(err)
		}
		now := func() time.Time { return s.end.Add(-time.Second) }
		g, err := readiness.Evaluate(ctx, st.DB(), readiness.Options{Cluster: "clean", Target: weekly.Version{Major: 1, Minor: 25}, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if !g.Ready || !strings.Contains(g.Message, "; not checked: the rules that read request bodies") || g.Coverage.Bodies != "metadata-only" {
			t.Errorf("clean: ready %v, coverage %+v, message %q", g.Ready, g.Coverage, g.Message)
		}
		var text bytes.Buffer
		if err := readiness.Write(&text, "text", g); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(text.String(), "coverage: events by file, at Metadata level; writes logged without their bodies\nnot checked: ") {
			t.Errorf("text:\n%s", text.String())
		}
		// prod's heartbeats never said what its events were: no claim either way.
		g, err = readiness.Evaluate(ctx, st.DB(), readiness.Options{Cluster: "prod", Target: weekly.Version{Major: 1, Minor: 25}, Now: now})
		if err != nil || g.Coverage.Known || g.Unchecked != "" || strings.Contains(g.Message, "not checked") {
			t.Errorf("prod: coverage %+v, message %q (%v)", g.Coverage, g.Message, err)
		}
	})
}

// gateAgreesWithWeekly judges cluster against target at now and builds the weekly report of
// week: both list want, each blocker as "+API " (new) or "!API " (failing now), with its rule
// before the API when withRule. It returns the gate's result and the report.
func gateAgreesWithWeekly(ctx context.Context, t *testing.T, st *store.Store, cluster string, target weekly.Version, week weekly.Date,
	now func() time.Time, withRule bool, want string) (*readiness.Result, *weekly.Report) {
	t.Helper()
	g, err := readiness.Evaluate(ctx, st.DB(), readiness.Options{Cluster: cluster, Target: target, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := weekly.Build(ctx, st.DB(), weekly.Options{Cluster: cluster, Target: target, WeekEnding: week, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	for what, bs := range map[string][]weekly.Blocker{"gate": g.Blockers, "weekly": rep.Blockers} {
		got := ""
		for _, b := range bs {
			mark := "+"
			if b.FailingNow {
				mark = "!"
			}
			if withRule {
				mark += b.RuleID + " "
			}
			got += mark + b.API() + " "
		}
		if got != want {
			t.Errorf("%s: blockers %q, want %q", what, got, want)
		}
	}
	return g, rep
}

// TestGateReadyOnceTheCallersMigrated: a caller that calls the replacement after its last call
// of a removed API no longer blocks (the gate, the weekly report and the console agree), the
// gate is ready once the last blocking caller moved, and a later call of the removed API
// blocks again.
func TestGateReadyOnceTheCallersMigrated(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s := newSeed()
		at := func(h int) time.Time { return s.start.Add(time.Duration(h) * time.Hour) }
		const driver, agent = "system:serviceaccount:dra:driver", "driver/v0.3"
		dc := func(id, user, ua string, h int) *auditlensv1.Finding {
			return f("dra", "removed-api", id, "resource.k8s.io", "v1beta1", "deviceclasses", "1.38", user, ua, "", at(h))
		}
		fs := []*auditlensv1.Finding{dc("b1", "bob", "kubectl/v1.37.0", 20)}
		for h := 10; h <= 50; h += 10 {
			fs = append(fs, dc(fmt.Sprintf("d%d", h), driver, agent, h))
		}
		for i, t := 0, s.start; t.Before(s.end); i, t = i+1, t.Add(50*time.Minute) {
			fs = append(fs, f("dra", "deprecated-api", fmt.Sprintf("c%d", i), "", "v1", "componentstatuses", "", "prober", "curl/8", "", t))
		}
		if err := st.WriteFindings(ctx, fs); err != nil {
			t.Fatal(err)
		}
		target := weekly.Version{Major: 1, Minor: 38}
		now := func() time.Time { return s.end.Add(-time.Second) }
		judge := func(when string, ready bool, callers, migrated int) *readiness.Result {
			t.Helper()
			g, err := readiness.Evaluate(ctx, st.DB(), readiness.Options{Cluster: "dra", Target: target, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, b := range g.Blockers {
				n += b.CallerCount
			}
			if g.Ready != ready || n != callers || g.MigratedCount != migrated || len(g.Migrated) != migrated {
				t.Errorf("%s: ready %v with %d blocking callers and %d migrated (%v); want %v, %d, %d: %s", when, g.Ready, n, g.MigratedCount,
					g.Migrated, ready, callers, migrated, g.Message)
			}
			w, err := weekly.Build(ctx, st.DB(), weekly.Options{Cluster: "dra", Target: target, WeekEnding: s.week, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			if w.MigratedCount != g.MigratedCount || len(w.Blockers) != len(g.Blockers) || w.Totals.BlockerCallers != n {
				t.Errorf("%s: the weekly report has %d blockers with %d callers and %d migrated, the gate %d, %d, %d", when,
					len(w.Blockers), w.Totals.BlockerCallers, w.MigratedCount, len(g.Blockers), n, g.MigratedCount)
			}
			cb, err := (console.Reader{DB: st.DB()}).Blockers(ctx, "dra", console.Window{From: s.start, To: s.end}, target)
			if err != nil {
				t.Fatal(err)
			}
			var cn uint64
			for _, b := range cb {
				cn += b.Callers
			}
			if len(cb) != len(g.Blockers) || int(cn) != n {
				t.Errorf("%s: the console has %d blockers with %d callers, the gate %d with %d", when, len(cb), cn, len(g.Blockers), n)
			}
			return g
		}
		judge("before any move", false, 2, 0)
		move := func(user, ua string, h int) {
			t.Helper()
			if err := st.WriteMigrationSightings(ctx, []store.MigrationSighting{{Cluster: "dra", APIGroup: "resource.k8s.io", APIVersion: "v1beta1",
				Resource: "deviceclasses", Username: user, UserAgent: ua, Seen: at(h).Add(time.Second)}}); err != nil {
				t.Fatal(err)
			}
		}
		// A call of the replacement in the same second as the last removed one proves nothing.
		if err := st.WriteMigrationSightings(ctx, []store.MigrationSighting{{Cluster: "dra", APIGroup: "resource.k8s.io", APIVersion: "v1beta1",
			Resource: "deviceclasses", Username: driver, UserAgent: agent, Seen: at(50)}}); err != nil {
			t.Fatal(err)
		}
		judge("a replacement call in the second of the last removed one", false, 2, 0)
		move(driver, agent, 50)
		g := judge("the driver moved", false, 1, 1)
		if m := g.Migrated[0]; m.Username != driver || m.Findings != 5 || !m.MigratedAt.Equal(at(50).Add(time.Second)) || !m.LastSeen.Equal(at(50)) {
			t.Errorf("migrated %+v", m)
		}
		// Another agent of the same user is another caller: it has not moved.
		move("bob", "kubectl/v1.38.0", 21)
		judge("bob's other agent", false, 1, 1)
		move("bob", "kubectl/v1.37.0", 21)
		g = judge("every caller moved", true, 0, 2)
		if !strings.Contains(g.Message, "2 caller(s) moved to the replacement") {
			t.Errorf("message %q does not name the moves", g.Message)
		}
		// The driver goes back to v1beta1: it blocks again, bob stays migrated.
		if err := st.WriteFindings(ctx, []*auditlensv1.Finding{dc("d60", driver, agent, 60)}); err != nil {
			t.Fatal(err)
		}
		g = judge("the driver went back", false, 1, 1)
		// Counted by day: the call after the move and the one of the same day before it.
		if len(g.Blockers) == 1 && (g.Blockers[0].Findings != 2 || g.Blockers[0].Callers[0].Username != driver) {
			t.Errorf("blocker %+v: want the driver's day of its calls around the move", g.Blockers[0])
		}
	})
}

// TestVerdictSaysWhatTheCatalogueKnows: the coverage names the release the rule catalogue is
// reviewed through (from classify's heartbeats, the oldest of two classify versions); a
// target past it is judged with "not checked: what 1.39 removes and changes"; one within it
// is not.
func TestVerdictSaysWhatTheCatalogueKnows(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s := newSeed()
		s.write(ctx, t, st)
		if err := st.WriteReviewSightings(ctx, []store.ReviewSighting{
			{Cluster: "clean", Through: weekly.Version{Major: 1, Minor: 39}, Seen: s.start.Add(time.Hour)},
			{Cluster: "clean", Through: weekly.Version{Major: 1, Minor: 38}, Seen: s.start.Add(2 * time.Hour)},
			// Before the window: not what judged it.
			{Cluster: "clean", Through: weekly.Version{Major: 1, Minor: 30}, Seen: s.start.Add(-time.Hour)},
		}); err != nil {
			t.Fatal(err)
		}
		now := func() time.Time { return s.end.Add(-time.Second) }
		judge := func(minor int) *readiness.Result {
			t.Helper()
			g, err := readiness.Evaluate(ctx, st.DB(), readiness.Options{Cluster: "clean", Target: weekly.Version{Major: 1, Minor: minor}, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
		g := judge(38)
		if g.Coverage.ReviewedThrough.String() != "1.38" || g.Unchecked != "" || !strings.Contains(g.Coverage.String(), "; rules reviewed through 1.38") {
			t.Errorf("1.38: reviewed through %s, not checked %q, coverage %q", g.Coverage.ReviewedThrough, g.Unchecked, g.Coverage)
		}
		g = judge(40)
		if want := "not checked: what 1.39 to 1.40 remove and change: the rule catalogue is reviewed through 1.38"; !g.Ready || !strings.Contains(g.Message, want) {
			t.Errorf("1.40: ready %v, message %q; want %q", g.Ready, g.Message, want)
		}
		if g := judge(39); !strings.Contains(g.Unchecked, "what 1.39 removes and changes") {
			t.Errorf("1.39: not checked %q", g.Unchecked)
		}
	})
}
