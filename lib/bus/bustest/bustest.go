// Package bustest is the conformance suite every bus.Bus implementation passes, run against
// the real engine (embedded nats-server, kfake Kafka cluster).
package bustest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/testkit"
)

// Opener opens a fresh, empty bus for one subtest; it registers its own cleanup.
type Opener func(t *testing.T) bus.Bus

// Messages returns n messages for stream s spread over the given number of clusters, with
// ids "<prefix>-<i>" and a ~1.2 KB body.
func Messages(s bus.Stream, prefix string, n, clusters int) []bus.Message {
	body := make([]byte, 1200)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	out := make([]bus.Message, n)
	for i := range out {
		out[i] = bus.Message{
			Stream:  s,
			Cluster: fmt.Sprintf("c%d", i%clusters),
			ID:      fmt.Sprintf("%s-%d", prefix, i),
			Header:  map[string]string{bus.HeaderNode: "node-a"},
			Data:    body,
		}
	}
	return out
}

// Collector gathers deliveries by ID.
type Collector struct {
	mu     sync.Mutex
	byID   map[string]int
	total  int
	notify chan struct{}
}

// NewCollector returns an empty collector.
func NewCollector() *Collector {
	return &Collector{byID: map[string]int{}, notify: make(chan struct{}, 1)}
}

// Add records one delivery.
func (c *Collector) Add(id string) {
	c.mu.Lock()
	c.byID[id]++
	c.total++
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// Counts returns distinct ids and total deliveries.
func (c *Collector) Counts() (distinct, total int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byID), c.total
}

// WaitDistinct polls until at least n distinct ids arrived or testkit.Bound(timeout) passes.
func (c *Collector) WaitDistinct(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	timeout = testkit.Bound(timeout)
	deadline := time.After(timeout)
	for {
		if d, _ := c.Counts(); d >= n {
			return
		}
		select {
		case <-c.notify:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			d, tot := c.Counts()
			t.Fatalf("after %s: %d distinct ids (%d deliveries), want %d", timeout, d, tot, n)
		}
	}
}

// Consume runs a consumer of stream s for group in the background until the returned stop
// is called (or the test ends).
func Consume(t *testing.T, b bus.Bus, s bus.Stream, group string, o bus.ConsumerOptions, h bus.Handler) (stop func()) {
	t.Helper()
	c, err := b.Consumer(s, group, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Consume(ctx, h) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("consume: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// AckAll is a handler that records every delivery in col and acknowledges it.
func AckAll(col *Collector) bus.Handler {
	return func(ctx context.Context, d *bus.Delivery) {
		col.Add(d.ID)
		_ = d.Ack(ctx)
	}
}

// quiet waits a short, fixed period in which nothing more may arrive. It is the only way to
// observe "no more deliveries"; it asserts absence, never speed.
const quiet = 700 * time.Millisecond

// Run runs the conformance suite.
func Run(t *testing.T, open Opener) {
	ctx := context.Background()

	t.Run("PublishNConsumeExactlyN", func(t *testing.T) {
		b := open(t)
		const n = 2000
		msgs := Messages(bus.Findings, "pc", n, 3)
		for i := 0; i < n; i += 500 {
			if err := b.Publish(ctx, msgs[i:i+500]...); err != nil {
				t.Fatal(err)
			}
		}
		col := NewCollector()
		var hdrOK sync.Once
		seenHeader := false
		stop := Consume(t, b, bus.Findings, "g1", bus.ConsumerOptions{}, func(ctx context.Context, d *bus.Delivery) {
			hdrOK.Do(func() { seenHeader = d.Header[bus.HeaderNode] == "node-a" && d.Cluster != "" && len(d.Data) == 1200 })
			AckAll(col)(ctx, d)
		})
		col.WaitDistinct(t, n, 30*time.Second)
		time.Sleep(quiet)
		stop()
		if d, tot := col.Counts(); d != n || tot != n {
			t.Fatalf("distinct=%d total=%d, want %d and %d", d, tot, n, n)
		}
		if !seenHeader {
			t.Fatal("delivery lost its cluster, headers or body")
		}
	})

	// Ingest publishes thousands of events in one call; the bus must split them into what its
	// server accepts (Kafka brokers refuse record batches over message.max.bytes, 1 MiB).
	t.Run("LargeBatchInOneCall", func(t *testing.T) {
		b := open(t)
		const n = 4000 // ~4.8 MB
		if err := b.Publish(ctx, Messages(bus.Events, "lb", n, 1)...); err != nil {
			t.Fatal(err)
		}
		col := NewCollector()
		stop := Consume(t, b, bus.Events, "g5", bus.ConsumerOptions{}, AckAll(col))
		col.WaitDistinct(t, n, 30*time.Second)
		stop()
	})

	// Cluster names the managed clouds allow and a subject token does not (EKS: up to 100
	// characters; dots) are carried, in one publish with a plain one, and delivered under the
	// name they were published with; a name the bus cannot carry is refused for good.
	t.Run("ClusterNamesOfTheClouds", func(t *testing.T) {
		b := open(t)
		names := []string{"plain", "a.b", "eks-" + strings.Repeat("x", 96), "_lead"}
		msgs := Messages(bus.Events, "cn", len(names), 1)
		for i := range msgs {
			msgs[i].Cluster = names[i]
		}
		if err := b.Publish(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		got := map[string]string{}
		col := NewCollector()
		stop := Consume(t, b, bus.Events, "gcn", bus.ConsumerOptions{}, func(ctx context.Context, d *bus.Delivery) {
			mu.Lock()
			got[d.ID] = d.Cluster
			mu.Unlock()
			AckAll(col)(ctx, d)
		})
		col.WaitDistinct(t, len(names), 30*time.Second)
		stop()
		mu.Lock()
		defer mu.Unlock()
		for i, m := range msgs {
			if got[m.ID] != names[i] {
				t.Errorf("%s delivered as cluster %q, want %q", m.ID, got[m.ID], names[i])
			}
		}
		bad := Messages(bus.Events, "cnbad", 1, 1)[0]
		bad.Cluster = "line\nbreak"
		if err := b.Publish(ctx, bad); !errors.Is(err, bus.ErrInvalid) {
			t.Errorf("cluster name with a newline: %v, want bus.ErrInvalid", err)
		}
	})

	// A message over the server's limit is a permanent error, not an outage to wait out.
	t.Run("OversizedMessageIsTooLarge", func(t *testing.T) {
		b := open(t)
		m := Messages(bus.Events, "big", 1, 1)[0]
		m.Data = make([]byte, 9<<20)
		err := b.Publish(ctx, m)
		if !errors.Is(err, bus.ErrTooLarge) || errors.Is(err, bus.ErrUnavailable) {
			t.Fatalf("publishing 9 MiB: %v, want bus.ErrTooLarge", err)
		}
	})

	// A message the consumer fails on every time (Nak) is handed out MaxDeliver times, then
	// goes to the dead-letter stream, counted, and the others are not held up by it.
	t.Run("PoisonMessageEndsInDeadLetter", func(t *testing.T) {
		b := open(t)
		const n, maxDeliver = 50, 3
		msgs := Messages(bus.Events, "pm", n, 1)
		poison := msgs[17].ID
		msgs[17].Header = map[string]string{bus.HeaderNode: "node-a", bus.HeaderSource: "origin"}
		if err := b.Publish(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
		col := NewCollector()
		var mu sync.Mutex
		tries, gaveUp := 0, 0
		opts := bus.ConsumerOptions{MaxDeliver: maxDeliver, AckWait: 2 * time.Second,
			GaveUp: func(d *bus.Delivery) {
				mu.Lock()
				gaveUp++
				mu.Unlock()
			}}
		stop := Consume(t, b, bus.Events, "gp", opts, func(ctx context.Context, d *bus.Delivery) {
			if d.ID == poison {
				mu.Lock()
				tries++
				mu.Unlock()
				_ = d.Nak(10 * time.Millisecond)
				return
			}
			AckAll(col)(ctx, d)
		})
		dead := NewCollector()
		var dl bus.Delivery
		Consume(t, b, bus.DeadLetter, "gpd", bus.ConsumerOptions{}, func(ctx context.Context, d *bus.Delivery) {
			mu.Lock()
			dl = *d
			mu.Unlock()
			AckAll(dead)(ctx, d)
		})
		col.WaitDistinct(t, n-1, 30*time.Second)
		dead.WaitDistinct(t, 1, 30*time.Second)
		time.Sleep(quiet)
		stop()
		mu.Lock()
		defer mu.Unlock()
		if tries != maxDeliver || gaveUp != 1 {
			t.Errorf("poison handed out %d times and given up %d times, want %d and 1", tries, gaveUp, maxDeliver)
		}
		if d, tot := dead.Counts(); d != 1 || tot != 1 {
			t.Errorf("%d dead letters (%d deliveries), want 1", d, tot)
		}
		if dl.Header[bus.HeaderDelivered] != fmt.Sprint(maxDeliver) || dl.Header[bus.HeaderReason] == "" ||
			dl.Header[bus.HeaderNode] != "node-a" || len(dl.Data) != 1200 || dl.Header[bus.HeaderSource] == "" {
			t.Errorf("dead letter headers %v, %d bytes", dl.Header, len(dl.Data))
		}
	})

	t.Run("UnackedRedeliveredAfterRestart", func(t *testing.T) {
		b := open(t)
		const n = 200
		if err := b.Publish(ctx, Messages(bus.Events, "re", n, 1)...); err != nil {
			t.Fatal(err)
		}
		first := NewCollector()
		var mu sync.Mutex
		acked := map[string]bool{}
		opts := bus.ConsumerOptions{AckWait: time.Second, DrainTimeout: time.Second}
		stop := Consume(t, b, bus.Events, "g2", opts, func(ctx context.Context, d *bus.Delivery) {
			first.Add(d.ID)
			mu.Lock()
			defer mu.Unlock()
			if len(acked) < n/2 {
				acked[d.ID] = true
				_ = d.Ack(ctx)
			}
		})
		first.WaitDistinct(t, n, 30*time.Second)
		stop()

		second := NewCollector()
		Consume(t, b, bus.Events, "g2", opts, AckAll(second))
		second.WaitDistinct(t, n-len(acked), 30*time.Second)
		second.mu.Lock()
		defer second.mu.Unlock()
		for id := range acked {
			if second.byID[id] > 0 {
				t.Fatalf("acknowledged %s was delivered again", id)
			}
		}
	})

	// A live consumer keeps what it holds however long it holds it (a batch waiting for
	// ClickHouse), even with an acknowledgement wait of a fraction of that: nothing is
	// redelivered while its holder lives. (That a dead holder's deliveries come back is
	// UnackedRedeliveredAfterRestart.)
	t.Run("HeldDeliveriesKeptWhileTheHolderLives", func(t *testing.T) {
		b := open(t)
		const n = 20
		if err := b.Publish(ctx, Messages(bus.Events, "held", n, 1)...); err != nil {
			t.Fatal(err)
		}
		col := NewCollector()
		var mu sync.Mutex
		var held []*bus.Delivery
		opts := bus.ConsumerOptions{AckWait: 300 * time.Millisecond, DrainTimeout: time.Second}
		Consume(t, b, bus.Events, "gh", opts, func(_ context.Context, d *bus.Delivery) {
			col.Add(d.ID)
			mu.Lock()
			held = append(held, d)
			mu.Unlock()
		})
		col.WaitDistinct(t, n, 30*time.Second)
		time.Sleep(10 * opts.AckWait) // hold for ten acknowledgement waits
		mu.Lock()
		for _, d := range held {
			_ = d.Ack(ctx)
		}
		mu.Unlock()
		time.Sleep(quiet)
		col.mu.Lock()
		defer col.mu.Unlock()
		for id, k := range col.byID {
			if k != 1 {
				t.Errorf("%s delivered %d times while its holder was alive", id, k)
			}
		}
	})

	// NATS stores a republished id once (Nats-Msg-Id); Kafka stores it again and its consumer
	// drops the copy (see kafkabus). Either way a consumer sees each id once.
	t.Run("RepublishedIDDeliveredOnce", func(t *testing.T) {
		b := open(t)
		msgs := Messages(bus.Findings, "dup", 100, 2)
		for range 3 {
			if err := b.Publish(ctx, msgs...); err != nil {
				t.Fatal(err)
			}
		}
		col := NewCollector()
		stop := Consume(t, b, bus.Findings, "g3", bus.ConsumerOptions{}, AckAll(col))
		col.WaitDistinct(t, 100, 30*time.Second)
		time.Sleep(quiet)
		stop()
		if d, tot := col.Counts(); d != 100 || tot != 100 {
			t.Fatalf("distinct=%d total=%d after publishing each id 3 times, want 100/100", d, tot)
		}
	})

	t.Run("TwoConsumersShareTheWork", func(t *testing.T) {
		b := open(t)
		const n = 3000
		a, c := NewCollector(), NewCollector()
		all := NewCollector()
		slow := func(col *Collector) bus.Handler {
			return func(ctx context.Context, d *bus.Delivery) {
				col.Add(d.ID)
				all.Add(d.ID)
				time.Sleep(200 * time.Microsecond) // give the other member a share
				_ = d.Ack(ctx)
			}
		}
		opts := bus.ConsumerOptions{MaxUnacked: 64}
		stopA := Consume(t, b, bus.Events, "shared", opts, slow(a))
		stopC := Consume(t, b, bus.Events, "shared", opts, slow(c))
		// Let both members join before publishing (Kafka assigns partitions on join).
		time.Sleep(2 * time.Second)
		msgs := Messages(bus.Events, "sh", n, 12)
		for i := 0; i < n; i += 500 {
			if err := b.Publish(ctx, msgs[i:i+500]...); err != nil {
				t.Fatal(err)
			}
		}
		all.WaitDistinct(t, n, 60*time.Second)
		stopA()
		stopC()
		da, _ := a.Counts()
		dc, _ := c.Counts()
		if da == 0 || dc == 0 {
			t.Fatalf("work not shared: %d and %d", da, dc)
		}
		if d, _ := all.Counts(); d != n {
			t.Fatalf("distinct=%d want %d", d, n)
		}
		t.Logf("split %d / %d", da, dc)
	})

	// The backlog ingest holds publishing back with: everything ahead of a group that has not
	// started, then only what it has not acknowledged, down to zero.
	t.Run("BacklogIsWhatTheGroupHasNotAcked", func(t *testing.T) {
		b := open(t)
		br, ok := b.(bus.BacklogReader)
		if !ok {
			t.Fatalf("%T does not report a backlog (bus.BacklogReader)", b)
		}
		backlog := func() int64 {
			n, err := br.Backlog(ctx, bus.Events, "gb")
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		const n, acked = 30, 10
		if got := backlog(); got != 0 {
			t.Fatalf("backlog of an empty stream: %d", got)
		}
		if err := b.Publish(ctx, Messages(bus.Events, "bl", n, 1)...); err != nil {
			t.Fatal(err)
		}
		if got := backlog(); got != n {
			t.Fatalf("backlog before the group started: %d, want %d", got, n)
		}
		col := NewCollector()
		var mu sync.Mutex
		var held []*bus.Delivery
		Consume(t, b, bus.Events, "gb", bus.ConsumerOptions{}, func(ctx context.Context, d *bus.Delivery) {
			mu.Lock()
			defer mu.Unlock()
			if d2, _ := col.Counts(); d2 < acked {
				_ = d.Ack(ctx)
			} else {
				held = append(held, d)
			}
			col.Add(d.ID)
		})
		col.WaitDistinct(t, n, 30*time.Second)
		testkit.Eventually(t, 10*time.Second, fmt.Sprintf("a backlog of the %d held messages", n-acked), func() bool { return backlog() == n-acked })
		mu.Lock()
		for _, d := range held {
			_ = d.Ack(ctx)
		}
		mu.Unlock()
		testkit.Eventually(t, 10*time.Second, "a backlog of 0 once all are acknowledged", func() bool { return backlog() == 0 })
	})
}
