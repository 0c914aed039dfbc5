package natsbus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/bustest"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
)

// A durable consumer created by an earlier build (unbounded MaxDeliver) takes the bound on
// upgrade instead of failing to start.
func TestMaxDeliverAppliesToAnExistingConsumer(t *testing.T) {
	ctx := context.Background()
	dir, addr := t.TempDir(), freePort(t)
	srv, err := natsbus.StartServer(dir, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	b, err := natsbus.Open(ctx, natsbus.Config{URL: "nats://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	nc, err := nats.Connect("nats://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	old := jetstream.ConsumerConfig{Durable: "old", FilterSubject: "auditlens.events.>", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 30 * time.Second, MaxAckPending: 4096, MaxDeliver: -1, DeliverPolicy: jetstream.DeliverAllPolicy}
	if _, err := js.CreateOrUpdateConsumer(ctx, natsbus.StreamName(bus.Events), old); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, bustest.Messages(bus.Events, "up", 10, 1)...); err != nil {
		t.Fatal(err)
	}
	c, err := b.Consumer(bus.Events, "old", bus.ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	col := bustest.NewCollector()
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- c.Consume(cctx, func(ctx context.Context, d *bus.Delivery) { col.Add(d.ID); _ = d.Ack(ctx) })
	}()
	col.WaitDistinct(t, 10, 30*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, natsbus.StreamName(bus.Events), "old")
	if err != nil {
		t.Fatal(err)
	}
	if got := cons.CachedInfo().Config.MaxDeliver; got <= 0 {
		t.Errorf("MaxDeliver of the upgraded consumer: %d, want a bound", got)
	}
}
