package ingest_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/ingest"
	"github.com/auditlens/auditlens/services/ingest/internal/testlog"
	"github.com/auditlens/auditlens/services/ingest/internal/testnats"
)

// With --bus-max-backlog, the file input stops publishing while classify's group is behind
// by the bound: the stream holds no more than the bound plus what the publishers had in
// hand, the rest of the audit log waits on disk (counted as lag), and once classify consumes,
// every event arrives exactly once.
func TestFileInputWaitsForTheBacklog(t *testing.T) {
	ev := testlog.Load(t)
	n := testnats.Start(t)
	b := n.Open(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	const lines = 200
	want := testlog.NewWriter(t, path).Events(t, ev, 0, lines)
	cfg := ingest.DefaultConfig(t.TempDir())
	cfg.File.Path, cfg.File.BatchSize, cfg.File.Publishers = path, 20, 2
	cfg.Batch.MaxEvents = 10 // two messages per read batch
	cfg.Backlog.Max = 3
	reg := prometheus.NewRegistry()
	comps, err := ingest.New(cfg, daemon.Deps{Bus: b, Cluster: "test", Logger: testlog.Logger(t), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.RunStages(ctx, comps, testlog.Logger(t)) }()
	testkit.Eventually(t, 30*time.Second, "publishing to wait for the backlog", func() bool {
		return gathered(t, reg, "auditlens_ingest_backlog_waits_total") >= 1
	})
	const most = 3 + 2*2 // the bound, plus two publishers' batches of two messages
	if got := n.Stored(t, bus.Events); got > most {
		t.Fatalf("the events stream holds %d messages while classify consumes nothing; want at most %d", got, most)
	}
	if lag := gathered(t, reg, "auditlens_ingest_lag_bytes"); lag <= 0 {
		t.Fatalf("lag %v bytes while most of the audit log waits, want more than 0", lag)
	}
	// classify starts: everything flows, exactly once.
	c, err := b.Consumer(bus.Events, "classify", bus.ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cctx, stopClassify := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = c.Consume(cctx, func(ctx context.Context, d *bus.Delivery) { _ = d.Ack(ctx) })
	})
	testkit.Eventually(t, 60*time.Second, "every event on the stream", func() bool { return n.Count(t, bus.Events) == lines })
	testkit.Eventually(t, 30*time.Second, "classify's backlog to drain", func() bool {
		got, err := b.Backlog(context.Background(), bus.Events, "classify")
		return err == nil && got == 0
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	stopClassify()
	wg.Wait()
	testnats.CheckExactlyOnce(t, n.Messages(t, bus.Events), want)
}

// gathered is the sum of the series of metric name on reg (0 when absent).
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}
