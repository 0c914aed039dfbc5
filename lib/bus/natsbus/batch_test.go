package natsbus_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/bustest"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
)

// The conformance suite again, publishing one message at a time as with servers before 2.14.
func TestConformanceOneAtATime(t *testing.T) {
	bustest.Run(t, func(t *testing.T) bus.Bus {
		b, err := natsbus.Open(context.Background(), natsbus.Config{URL: natsbus.Embedded, StoreDir: t.TempDir(), OneAtATime: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	})
}

// inspect opens the bus on an embedded server listening on loopback and a plain JetStream
// client on the same server, to look at the streams from outside.
func inspect(t *testing.T, cfg natsbus.Config) (*natsbus.Bus, jetstream.JetStream) {
	t.Helper()
	cfg.URL, cfg.StoreDir, cfg.EmbeddedListen = natsbus.Embedded, t.TempDir(), "127.0.0.1:0"
	b, err := natsbus.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	nc, err := nats.Connect(b.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return b, js
}

func streamMsgs(t *testing.T, js jetstream.JetStream, s bus.Stream) uint64 {
	t.Helper()
	st, err := js.Stream(context.Background(), natsbus.StreamName(s))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// A batch far larger than the flow-control window, spread over clusters and two streams,
// is stored once; publishing it again stores nothing new.
func TestBatchLargerThanWindow(t *testing.T) {
	b, js := inspect(t, natsbus.Config{MaxInflight: 16})
	msgs := bustest.Messages(bus.Events, "w", 3000, 3)
	for i := 0; i < len(msgs); i += 7 {
		msgs[i].Stream = bus.DeadLetter
	}
	dead := uint64((len(msgs) + 6) / 7)
	for range 2 {
		if err := b.Publish(context.Background(), msgs...); err != nil {
			t.Fatal(err)
		}
		if ev, dl := streamMsgs(t, js, bus.Events), streamMsgs(t, js, bus.DeadLetter); ev != uint64(len(msgs))-dead || dl != dead {
			t.Fatalf("streams hold %d events and %d dead letters, want %d and %d", ev, dl, uint64(len(msgs))-dead, dead)
		}
	}
}

// Publishers sharing one bus run their batches side by side (the server then acknowledges
// each more often); every message is stored once.
func TestConcurrentBatches(t *testing.T) {
	b, js := inspect(t, natsbus.Config{})
	const publishers, each = 4, 2500
	var wg sync.WaitGroup
	errs := make(chan error, publishers)
	for p := range publishers {
		wg.Go(func() {
			msgs := bustest.Messages(bus.Events, fmt.Sprintf("p%d", p), each, 2)
			for i := 0; i < each; i += 500 {
				if err := b.Publish(context.Background(), msgs[i:i+500]...); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := streamMsgs(t, js, bus.Events); n != publishers*each {
		t.Fatalf("stream holds %d, want %d", n, publishers*each)
	}
}

// When the server refuses a message in the middle of a batch (here: larger than the
// stream's max_msg_size), Publish fails with bus.ErrTooLarge; publishing the batch without
// that message then stores each of the others exactly once.
func TestServerRefusesMessageMidBatch(t *testing.T) {
	b, js := inspect(t, natsbus.Config{AckTimeout: 5 * time.Second})
	ctx := context.Background()
	st, err := js.Stream(ctx, natsbus.StreamName(bus.Events))
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxMsgSize = 4000
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	msgs := bustest.Messages(bus.Events, "r", 100, 1)
	msgs[50].Data = make([]byte, 5000)
	err = b.Publish(ctx, msgs...)
	if !errors.Is(err, bus.ErrTooLarge) {
		t.Fatalf("publish with a refused message: %v, want bus.ErrTooLarge", err)
	}
	if n := streamMsgs(t, js, bus.Events); n != 50 {
		t.Fatalf("stream holds %d after the refusal, want the 50 before it", n)
	}
	rest := append(append([]bus.Message(nil), msgs[:50]...), msgs[51:]...)
	if err := b.Publish(ctx, rest...); err != nil {
		t.Fatal(err)
	}
	if n := streamMsgs(t, js, bus.Events); n != 99 {
		t.Fatalf("stream holds %d, want 99", n)
	}
}

// Streams created by an earlier build (without batched publishing) are updated in place and
// keep what they hold.
func TestStreamsOfAnEarlierBuildAreUpgraded(t *testing.T) {
	dir, addr := t.TempDir(), freePort(t)
	srv, err := natsbus.StartServer(dir, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect("nats://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: natsbus.StreamName(bus.Events), Subjects: []string{"auditlens.events.>"},
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, MaxAge: 7 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, natsbus.Subject(bus.Events, "old"), []byte("{}"), jetstream.WithMsgID("old/1")); err != nil {
		t.Fatal(err)
	}
	b, err := natsbus.Open(ctx, natsbus.Config{URL: "nats://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st, err := js.Stream(ctx, natsbus.StreamName(bus.Events))
	if err != nil {
		t.Fatal(err)
	}
	if !st.CachedInfo().Config.AllowBatchPublish {
		t.Fatal("stream not updated for batched publishing")
	}
	if err := b.Publish(ctx, bustest.Messages(bus.Events, "new", 10, 1)...); err != nil {
		t.Fatal(err)
	}
	if n := streamMsgs(t, js, bus.Events); n != 11 {
		t.Fatalf("stream holds %d, want the old message and 10 new", n)
	}
}

// Another process turning batched publishing off on a stream (an older build, or one that met
// a stream it could not update) does not stop this one: its next batch is refused ("batch
// publish is disabled") and it publishes one message at a time from then on. Before, every
// publish failed as "bus unavailable" and was retried for ever (seen with replicas starting
// together on a cluster).
func TestBatchingTurnedOffByAnotherProcess(t *testing.T) {
	dir, addr := t.TempDir(), freePort(t)
	srv, err := natsbus.StartServer(dir, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	ctx := context.Background()
	b, err := natsbus.Open(ctx, natsbus.Config{URL: "nats://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Publish(ctx, bustest.Messages(bus.Events, "batched", 10, 1)...); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect("nats://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctx, natsbus.StreamName(bus.Events))
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.AllowBatchPublish = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := b.Publish(pctx, bustest.Messages(bus.Events, "after", 50, 1)...); err != nil {
		t.Fatalf("publish after batching was turned off: %v", err)
	}
	if n := streamMsgs(t, js, bus.Events); n != 60 {
		t.Fatalf("stream holds %d, want 60", n)
	}
}

// Large messages are pulled by bytes as well as by count: a consumer holding hundreds of
// 256 KiB deliveries does not overrun what the server buffers for one client (64 MiB), and
// gets every message once.
func TestConsumeLargeMessages(t *testing.T) {
	b, _ := inspect(t, natsbus.Config{})
	ctx := context.Background()
	const n = 400
	msgs := bustest.Messages(bus.Findings, "big", n, 1)
	body := make([]byte, 256<<10)
	for i := range msgs {
		msgs[i].Data = body
	}
	for i := 0; i < n; i += 50 {
		if err := b.Publish(ctx, msgs[i:i+50]...); err != nil {
			t.Fatal(err)
		}
	}
	c, err := b.Consumer(bus.Findings, "big", bus.ConsumerOptions{AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	col := bustest.NewCollector()
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	held := make(chan *bus.Delivery, n)
	go func() {
		done <- c.Consume(cctx, func(ctx context.Context, d *bus.Delivery) { col.Add(d.ID); held <- d })
	}()
	// Settle late, in bulk, as a writer that commits large batches does.
	go func() {
		for d := range held {
			time.Sleep(time.Millisecond)
			_ = d.Ack(ctx)
		}
	}()
	col.WaitDistinct(t, n, 30*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	close(held)
	if d, total := col.Counts(); d != n || total != n {
		t.Fatalf("%d distinct of %d deliveries, want %d once each", d, total, n)
	}
}
