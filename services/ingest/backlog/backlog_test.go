package backlog_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/bustest"
	"github.com/auditlens/auditlens/lib/bus/kafkabus"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/ingest/backlog"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).Start.func1"))
}

// engine is a real bus: an embedded JetStream server, or an in-process Kafka cluster (kfake
// speaks the wire protocol).
type engine struct {
	name string
	open func(t *testing.T) bus.Bus
}

var engines = []engine{
	{"nats", func(t *testing.T) bus.Bus {
		b, err := natsbus.Open(context.Background(), natsbus.Config{URL: natsbus.Embedded, StoreDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}},
	{"kafka", func(t *testing.T) bus.Bus {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		b, err := kafkabus.Open(context.Background(), kafkabus.Config{Brokers: c.ListenAddrs(), CreateTopics: true, Partitions: 3})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}},
}

// events returns n event messages with ids "<prefix>-<i>".
func events(prefix string, n int) []bus.Message {
	out := make([]bus.Message, n)
	for i := range out {
		out[i] = bus.Message{Stream: bus.Events, Cluster: "c1", ID: fmt.Sprintf("%s-%d", prefix, i), Data: []byte(`{"kind":"Event"}`)}
	}
	return out
}

// gate wraps b with a bound of max messages for group "classify", its stage running until
// the test ends (or until the returned stop).
func gate(t *testing.T, b bus.Bus, max int64) (*backlog.Gate, *prometheus.Registry, context.CancelFunc) {
	t.Helper()
	reg := prometheus.NewRegistry()
	g := backlog.New(backlog.Config{Max: max, Group: "classify"}, b.(backlog.Bus), nil, reg)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		_ = g.Run(ctx)
		close(done)
	}()
	t.Cleanup(func() {
		stop()
		<-done
	})
	return g, reg, stop
}

// classify consumes the events stream as group "classify", acknowledging and recording
// every message.
func classify(t *testing.T, b bus.Bus) *bustest.Collector {
	t.Helper()
	col := bustest.NewCollector()
	bustest.Consume(t, b, bus.Events, "classify", bus.ConsumerOptions{}, bustest.AckAll(col))
	return col
}

// returned waits for a publish running in the background to return, and fails t unless it
// returns nil.
func returned(t *testing.T, published <-chan error, what string) {
	t.Helper()
	select {
	case err := <-published:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testkit.Bound(30 * time.Second)):
		t.Fatal(what)
	}
}

// metric is the value of the counter or gauge name on reg (0 when absent).
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		m := mf.GetMetric()[0]
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	return 0
}

func backlogOf(t *testing.T, b bus.Bus) int64 {
	t.Helper()
	n, err := b.(bus.BacklogReader).Backlog(context.Background(), bus.Events, "classify")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// With classify not consuming, publishing stops at the bound: the publish past it waits
// (counted), dead letters still pass, and once classify drains the stream the waiting
// publish goes through; every message arrives exactly once.
func TestPublishWaitsOverTheBoundAndResumesWhenDrained(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			b := e.open(t)
			const max = 8
			g, reg, _ := gate(t, b, max)
			ctx := context.Background()
			msgs := events("e", 3*max)
			for i := range max {
				if err := g.Publish(ctx, msgs[i]); err != nil {
					t.Fatal(err)
				}
			}
			published := make(chan error, 1)
			go func() { published <- g.Publish(ctx, msgs[max:]...) }()
			testkit.Eventually(t, 10*time.Second, "the publish past the bound to wait", func() bool { return metric(t, reg, "auditlens_ingest_backlog_waits_total") == 1 })
			select {
			case err := <-published:
				t.Fatalf("the publish past the bound returned (%v) while classify consumed nothing", err)
			default:
			}
			if n := backlogOf(t, b); n != max {
				t.Fatalf("the stream holds %d messages for classify while publishing waits, want the bound %d", n, max)
			}
			dl := bus.NewDeadLetter("c1", "test", "dl-1", "test", errors.New("bad line"), []byte("x"), nil)
			if err := g.Publish(ctx, dl); err != nil {
				t.Fatalf("a dead letter waited for the events backlog: %v", err)
			}
			col := classify(t, b)
			returned(t, published, "publishing did not resume once classify consumed")
			col.WaitDistinct(t, len(msgs), 30*time.Second)
			testkit.Eventually(t, 10*time.Second, "a backlog of 0", func() bool { return backlogOf(t, b) == 0 })
			if distinct, total := col.Counts(); distinct != len(msgs) || total != len(msgs) {
				t.Errorf("%d distinct messages in %d deliveries, want each of the %d once", distinct, total, len(msgs))
			}
			if s := metric(t, reg, "auditlens_ingest_backlog_wait_seconds_total"); s <= 0 {
				t.Errorf("wait seconds %v, want more than 0", s)
			}
		})
	}
}

// A waiting publish ends with its context (the webhook answers 429 then), and the gate's
// stage ending (shutdown) lets every waiting publish through: nothing waits for a classify
// that is stopping too.
func TestWaitEndsWithTheContextAndAtShutdown(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			b := e.open(t)
			g, _, stop := gate(t, b, 2)
			msgs := events("s", 4)
			if err := g.Publish(context.Background(), msgs[:2]...); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			err := g.Publish(ctx, msgs[2])
			if !errors.Is(err, bus.ErrBacklog) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("publish past the bound with a deadline: %v, want bus.ErrBacklog and the deadline", err)
			}
			published := make(chan error, 1)
			go func() { published <- g.Publish(context.Background(), msgs[2:]...) }()
			stop()
			returned(t, published, "a publish still waits after the gate's stage stopped")
			if n := backlogOf(t, b); n != 4 {
				t.Fatalf("backlog %d after the release, want all 4 published", n)
			}
		})
	}
}

// Readiness fails only after publishing has waited without a break for long (a minute; here
// shortened): a short wait is the normal pace of a busy pipeline. It names the group, and
// is back as soon as a publish found the backlog below the bound.
func TestReadinessFailsOnlyOnALongWait(t *testing.T) {
	b := engines[0].open(t)
	g, _, _ := gate(t, b, 1)
	if err := g.Publish(context.Background(), events("r", 1)...); err != nil {
		t.Fatal(err)
	}
	overBound := func(d time.Duration) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		if err := g.Publish(ctx, events("r2", 1)...); !errors.Is(err, bus.ErrBacklog) {
			t.Fatalf("publish past the bound: %v", err)
		}
	}
	overBound(200 * time.Millisecond)
	if err := g.Stalled(); err != nil {
		t.Fatalf("not ready after a 200ms wait: %v", err)
	}
	g.SetStallAfter(300 * time.Millisecond)
	overBound(500 * time.Millisecond)
	if err := g.Stalled(); err == nil || !strings.Contains(err.Error(), "classify") {
		t.Fatalf("readiness after waiting past the bound: %v, want an error naming the group", err)
	}
	col := classify(t, b)
	col.WaitDistinct(t, 1, 30*time.Second)
	testkit.Eventually(t, 10*time.Second, "a backlog of 0", func() bool { return backlogOf(t, b) == 0 })
	if err := g.Publish(context.Background(), events("r3", 1)...); err != nil {
		t.Fatal(err)
	}
	if err := g.Stalled(); err != nil {
		t.Fatalf("not ready once publishing went on: %v", err)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  backlog.Config
		want string
	}{
		{backlog.Config{Max: -1, Group: "classify"}, "--bus-max-backlog -1"},
		{backlog.Config{Max: 10}, "--bus-backlog-group"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %s", c.cfg, err, c.want)
		}
	}
	if err := backlog.DefaultConfig().Validate(); err != nil || backlog.DefaultConfig().On() {
		t.Errorf("default: %v, on %v; want valid and off", err, backlog.DefaultConfig().On())
	}
}
