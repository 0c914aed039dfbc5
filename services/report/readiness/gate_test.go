package readiness_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/readiness"
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
