package natsbus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/bustest"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/bus/natsbus/natscluster"
	"github.com/auditlens/auditlens/lib/testkit"
)

// The conformance suite on a 3-server JetStream cluster with 3 replicas per stream, the bus
// connected through the URL list of the three servers. Each subtest gets empty streams: the
// previous subtest's are deleted first.
func TestConformanceOnCluster(t *testing.T) {
	c := natscluster.Start(t, 3)
	js := admin(t, c)
	bustest.Run(t, func(t *testing.T) bus.Bus {
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Bound(30*time.Second))
		defer cancel()
		for _, s := range bus.Streams {
			if err := js.DeleteStream(ctx, natsbus.StreamName(s)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				t.Fatal(err)
			}
		}
		b, err := openOn(t, c, 3)
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

// ledger records every delivery of a run's ids (those with its prefix): for each id, the
// stream positions it was delivered from and how often.
type ledger struct {
	prefix     string
	mu         sync.Mutex
	positions  map[string]map[string]int
	deliveries int
}

func newLedger(prefix string) *ledger {
	return &ledger{prefix: prefix + "-", positions: map[string]map[string]int{}}
}

func (l *ledger) add(d *bus.Delivery) {
	if !strings.HasPrefix(d.ID, l.prefix) {
		return // an earlier run's
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.positions[d.ID] == nil {
		l.positions[d.ID] = map[string]int{}
	}
	l.positions[d.ID][d.Position]++
	l.deliveries++
}

func (l *ledger) distinct() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.positions)
}

// check asserts that every one of the n ids of the run was delivered, each from one stream
// position only (a second position would be a second stored copy: counted twice), and logs
// the redeliveries.
func (l *ledger) check(t *testing.T, n int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range n {
		if id := fmt.Sprintf("%s%d", l.prefix, i); l.positions[id] == nil {
			t.Errorf("%s never delivered", id)
		}
	}
	redelivered := 0
	for id, pos := range l.positions {
		if len(pos) != 1 {
			t.Errorf("%s stored more than once: delivered from %v", id, pos)
		}
		for _, k := range pos {
			redelivered += k - 1
		}
	}
	if len(l.positions) != n {
		t.Errorf("%d distinct ids delivered, want %d", len(l.positions), n)
	}
	t.Logf("%d distinct ids in %d deliveries (%d redeliveries of an id at its one position)", len(l.positions), l.deliveries, redelivered)
}

// publishRetrying publishes msgs in batches of 100, retrying a failed batch (same ids) until
// it is stored, as ingest does; it reports how many messages are stored so far.
func publishRetrying(ctx context.Context, b bus.Bus, msgs []bus.Message, stored func(int)) error {
	for i := 0; i < len(msgs); i += 100 {
		batch := msgs[i:min(i+100, len(msgs))]
		for attempt := 1; ; attempt++ {
			err := b.Publish(ctx, batch...)
			if err == nil {
				break
			}
			if ctx.Err() != nil || attempt == 600 {
				return fmt.Errorf("publish batch at %d, attempt %d: %w", i, attempt, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		stored(i + len(batch))
	}
	return nil
}

// consumeInto runs a consumer of group on s in the background, acknowledging every delivery
// after recording it, until the test ends; it fails the test if Consume gives up.
func consumeInto(t *testing.T, b bus.Bus, s bus.Stream, group string, l *ledger) {
	t.Helper()
	c, err := b.Consumer(s, group, bus.ConsumerOptions{AckWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.Consume(ctx, func(ctx context.Context, d *bus.Delivery) {
			l.add(d)
			_ = d.Ack(ctx)
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consume: %v", err)
		}
	})
}

func waitDistinct(t *testing.T, l *ledger, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for l.distinct() < n {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %d distinct ids delivered, want %d", timeout, l.distinct(), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// SIGKILL of the leader of the stream in the middle of a run (publisher publishing, consumer
// consuming and acknowledging), then a restart of that server: every id is delivered, each
// stored once, and the stream holds exactly n messages on the new leader and on the
// restarted server.
func TestStreamLeaderKilledMidRun(t *testing.T) {
	c := natscluster.Start(t, 3)
	js := admin(t, c)
	pub, err := openOn(t, c, 3)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := openOn(t, c, 3)
	if err != nil {
		t.Fatal(err)
	}
	stream := natsbus.StreamName(bus.Events)
	const n = 30000
	msgs := bustest.Messages(bus.Events, "kill", n, 5)
	l := newLedger("kill")
	consumeInto(t, sub, bus.Events, "kill", l)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	third := make(chan struct{})
	published := make(chan error, 1)
	go func() {
		var once sync.Once
		published <- publishRetrying(ctx, pub, msgs, func(stored int) {
			if stored >= n/3 {
				once.Do(func() { close(third) })
			}
		})
	}()
	<-third
	leader, err := c.StreamLeader(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	consumerLeader, _ := c.ConsumerLeader(ctx, stream, "kill")
	leader.Kill()
	t.Logf("killed %s, leader of %s (consumer leader %s), after %d of %d deliveries", leader.Name, stream, consumerLeader.Name, l.distinct(), n)
	next, err := c.StreamLeader(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s leads %s now, after %d deliveries", next.Name, stream, l.distinct())
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	waitDistinct(t, l, n, 2*time.Minute)
	if err := leader.WaitHealthy(time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // let redeliveries of unacknowledged messages, if any, arrive
	l.check(t, n)
	info, err := mustStream(t, js, stream).Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != n {
		t.Errorf("%s holds %d messages, want %d", stream, info.State.Msgs, n)
	}
	// The restarted server catches up from the others: poll, a loaded machine makes it slow.
	var last any
	testkit.Eventually(t, time.Minute, "the restarted "+leader.Name+" to catch up", func() bool {
		info, err := mustStream(t, js, stream).Info(ctx)
		if err != nil {
			return false
		}
		for _, p := range info.Cluster.Replicas {
			if p.Name == leader.Name {
				last = p
				return p.Current
			}
		}
		return false
	})
	t.Logf("restarted %s is current: %+v", leader.Name, last)
}

func mustStream(t *testing.T, js jetstream.JetStream, name string) jetstream.Stream {
	t.Helper()
	st, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A consumer whose connection is to the server that gets killed reconnects through another
// server and goes on consuming: given the URL list of all three, or only the URL of the
// killed one (the client learns the others from the cluster).
func TestConsumerReconnectsThroughAnotherServer(t *testing.T) {
	c := natscluster.Start(t, 3)
	pub, err := openOn(t, c, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i, urls := range []func(*natscluster.Server) string{
		func(*natscluster.Server) string { return c.URLs() },
		func(s *natscluster.Server) string { return s.URL() },
	} {
		name := []string{"url-list", "one-url"}[i]
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			// With one URL, the consumer is on that server; with the list, wherever it landed.
			sub, err := natsbus.Open(ctx, natsbus.Config{URL: urls(c.Servers[i]), Name: "consumer-" + name, Replicas: 3})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sub.Close() }) // after the consumer stopped (cleanups run last first)
			victim, err := c.ServerOf("consumer-" + name)
			if err != nil {
				t.Fatal(err)
			}
			l := newLedger(name)
			consumeInto(t, sub, bus.Findings, name, l)
			const n = 2000
			msgs := bustest.Messages(bus.Findings, name, n, 3)
			if err := publishRetrying(ctx, pub, msgs[:n/2], func(int) {}); err != nil {
				t.Fatal(err)
			}
			waitDistinct(t, l, n/2, time.Minute)
			victim.Kill()
			t.Logf("killed %s, the consumer's server", victim.Name)
			if err := publishRetrying(ctx, pub, msgs[n/2:], func(int) {}); err != nil {
				t.Fatal(err)
			}
			waitDistinct(t, l, n, time.Minute)
			now, err := c.ServerOf("consumer-" + name)
			if err != nil || now == victim {
				t.Fatalf("consumer now on %v (%v)", now, err)
			}
			t.Logf("consumer continued through %s", now.Name)
			l.check(t, n)
			if err := victim.Start(); err != nil {
				t.Fatal(err)
			}
			if err := victim.WaitHealthy(time.Minute); err != nil {
				t.Fatal(err)
			}
		})
	}
}
