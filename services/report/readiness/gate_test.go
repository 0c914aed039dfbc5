package readiness_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/readiness"
	"github.com/auditlens/auditlens/services/report/store"
	"github.com/auditlens/auditlens/services/report/weekly"
)

// published records what the gate publishes, as the UpgradeReadiness objects would hold it.
type published struct {
	mu   sync.Mutex
	last map[string]*readiness.Result
}

func (p *published) Publish(_ context.Context, r *readiness.Result) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last[r.Cluster+" "+r.Target.String()] = r
	return nil
}

// A store that fails every judgement must not leave the last verdict in force: each cluster
// judged before is published Unknown, NotJudged, with the error.
func TestGatePublishesNotJudgedWhenTheStoreFails(t *testing.T) {
	_, st := chtest.ServerStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := newSeed()
	s.write(ctx, t, st)
	cfg := readiness.DefaultConfig()
	cfg.Targets = readiness.Versions{{Major: 1, Minor: 34}}
	pub := &published{last: map[string]*readiness.Result{}}
	gate, err := readiness.NewGate(cfg, st.DB(), weekly.Version{}, nil, pub, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	readiness.SetClock(gate, func() time.Time { return s.end.Add(-time.Second) })
	if _, err := gate.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if r := pub.last["clean 1.34"]; r == nil || r.State != readiness.Ready {
		t.Fatalf("clean before the failure: %+v, want ready", r)
	}
	// The store loses what the gate reads.
	for _, table := range []string{"stream_minutes", "event_minutes", "findings"} {
		if _, err := st.DB().ExecContext(ctx, "DROP TABLE "+table); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := gate.RunOnce(ctx); err == nil {
		t.Fatal("RunOnce on a store without its tables: no error")
	}
	for _, c := range []string{"prod", "clean", "quiet", "migrated", "stalled"} {
		r := pub.last[c+" 1.34"]
		if r == nil || r.State != readiness.Unknown || r.Reason != readiness.ReasonNotJudged || r.Ready ||
			!strings.Contains(r.Message, "not judged for 1.34") {
			t.Errorf("%s after the failure: %+v, want unknown, NotJudged, with the error", c, r)
		}
	}
}

// Without a target version, the gate judges each cluster against the release after its own
// (one default for every command), and a cluster whose release is unknown not at all.
func TestGateJudgesEachClusterAgainstItsNextRelease(t *testing.T) {
	_, st := chtest.ServerStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := newSeed()
	s.write(ctx, t, st)
	if err := st.WriteControlPlaneSightings(ctx, []store.ControlPlaneSighting{
		{Cluster: "prod", Component: "kube-apiserver", Version: weekly.Version{Major: 1, Minor: 24}, Seen: s.start.Add(time.Hour)},
		{Cluster: "clean", Component: "kube-apiserver", Version: weekly.Version{Major: 1, Minor: 37}, Seen: s.start.Add(time.Hour)},
	}); err != nil {
		t.Fatal(err)
	}
	pub := &published{last: map[string]*readiness.Result{}}
	gate, err := readiness.NewGate(readiness.DefaultConfig(), st.DB(), weekly.Version{}, nil, pub, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	readiness.SetClock(gate, func() time.Time { return s.end.Add(-time.Second) })
	if _, err := gate.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	var got []string
	for k := range pub.last {
		got = append(got, k)
	}
	slices.Sort(got)
	// prod on 1.24 is judged for 1.25 (its PodSecurityPolicy use blocks), clean on 1.37 for 1.38.
	if want := []string{"clean 1.38", "prod 1.25"}; !slices.Equal(got, want) {
		t.Errorf("judged %v, want %v", got, want)
	}
	if r := pub.last["prod 1.25"]; r == nil || r.Ready {
		t.Errorf("prod for 1.25: %+v", r)
	}
}
