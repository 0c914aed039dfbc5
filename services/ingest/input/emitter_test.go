package input_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/lib/envelope"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/ingest/input"
	"github.com/auditlens/auditlens/services/ingest/metrics"
)

// failing refuses every publish with err until it is told to store, then stores: a bus that
// is connected (ready) but cannot take what a source publishes (a full stream, classify too
// far behind).
type failing struct {
	mu     sync.Mutex
	err    error
	stored []bus.Message
	tries  atomic.Int64
}

func (f *failing) Publish(_ context.Context, msgs ...bus.Message) error {
	f.tries.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	for i := range msgs {
		if err := msgs[i].Validate(); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	}
	f.stored = append(f.stored, msgs...)
	return nil
}

// ready is a bus that is always connected.
type ready struct{ bus.Publisher }

func (ready) Ready() error { return nil }

// TestStuckWhileRetrying: while a pulling source's publishing keeps failing, the input is
// stuck (its readiness fails); once it stores, it is not. Before, a source retrying for ever
// stayed ready.
func TestStuckWhileRetrying(t *testing.T) {
	m := metrics.New(nil)
	p := &failing{err: fmt.Errorf("stream full: %w", bus.ErrUnavailable)}
	em := input.MustEnv(input.Env{Bus: ready{p}, Metrics: m}).Emitter("kafka")
	msgs := []bus.Message{{Stream: bus.Events, Cluster: "c", ID: "c/a/x", Data: []byte("{}")}}
	done := make(chan error, 1)
	go func() {
		done <- em.PublishUntilStored(context.Background(), msgs, input.Counts{Events: 1}, "the offsets", "src")
	}()
	testkit.Eventually(t, time.Minute, "a failed publish", func() bool { return p.tries.Load() >= 1 })
	testkit.Eventually(t, time.Minute, "the input stuck", func() bool { return m.Stuck("kafka") != nil })
	if m.Stuck("cloudwatch") != nil {
		t.Error("another input is stuck too")
	}
	p.mu.Lock()
	p.err = nil
	p.mu.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := m.Stuck("kafka"); err != nil {
		t.Errorf("stored, still stuck: %v", err)
	}
	if got := testutil.ToFloat64(m.Published.WithLabelValues("kafka")); got != 1 {
		t.Errorf("published %v, want 1", got)
	}
}

// TestRefusedAloneNotRetried: a message the bus cannot carry (a cluster name with a control
// character) is dead-lettered alone and counted, the others are stored, and nothing is
// retried for ever.
func TestRefusedAloneNotRetried(t *testing.T) {
	m := metrics.New(nil)
	p := &failing{}
	em := input.MustEnv(input.Env{Bus: ready{p}, Metrics: m}).Emitter("kafka")
	msgs := []bus.Message{
		{Stream: bus.Events, Cluster: "ok", ID: "ok/a/x", Data: []byte("{}")},
		{Stream: bus.Events, Cluster: "bad\x07name", ID: "bad/b/x", Data: []byte("{}")},
		{Stream: bus.Events, Cluster: "x.long-name", ID: "x/c/x", Data: []byte("{}")},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := em.PublishUntilStored(ctx, msgs, input.Counts{Events: 3}, "the offsets", "src"); err != nil {
		t.Fatal(err)
	}
	var events, dead int
	for _, s := range p.stored {
		if s.Stream == bus.Events {
			events++
		} else {
			dead++
		}
	}
	if events != 2 || dead != 1 {
		t.Errorf("stored %d events and %d dead letters, want 2 and 1", events, dead)
	}
	if got := testutil.ToFloat64(m.Published.WithLabelValues("kafka")); got != 2 {
		t.Errorf("published %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.Bad.WithLabelValues("kafka", "unpublishable")); got != 1 {
		t.Errorf("bad{unpublishable} %v, want 1", got)
	}
	if errors.Is(m.Stuck("kafka"), bus.ErrInvalid) {
		t.Error("stuck on a message that was dead-lettered")
	}
}

// NewEnv is the one place the inputs' defaults are written: it fills in what is left out,
// refuses an env without a bus, and checks what it is given.
func TestNewEnv(t *testing.T) {
	if _, err := input.NewEnv(input.Env{}); err == nil {
		t.Error("an env without a bus was accepted")
	}
	env, err := input.NewEnv(input.Env{Bus: ready{&failing{}}})
	if err != nil {
		t.Fatal(err)
	}
	if env.Logger == nil || env.Metrics == nil || env.Budget == nil || env.MaxEventSize != input.DefaultMaxEventSize ||
		env.Batch != eventbatch.DefaultConfig() || env.Limits != envelope.DefaultLimits() {
		t.Errorf("defaults not filled in: %+v", env)
	}
	bad := envelope.DefaultLimits()
	bad.MaxDecoded = -1
	if _, err := input.NewEnv(input.Env{Bus: ready{&failing{}}, Limits: bad}); err == nil {
		t.Error("negative decoded-bytes limit accepted")
	}
}
