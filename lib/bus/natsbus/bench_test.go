package natsbus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/bustest"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
)

const benchBatch = 1000

// BenchmarkPublish compares the bus layer with plain nats.go async publishing of the same
// ~1.2 KB messages with Nats-Msg-Id on the same embedded server, in the same run.
func BenchmarkPublish(b *testing.B) {
	msgs := bustest.Messages(bus.Events, "bp", benchBatch, 1)
	b.Run("baseline=nats.go", func(b *testing.B) {
		bb := openBench(b)
		js, _ := jetstream.New(bb.conn(b), jetstream.WithPublishAsyncMaxPending(4096))
		b.SetBytes(int64(len(msgs[0].Data)))
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i += benchBatch {
			for j := 0; j < benchBatch; j++ {
				m := nats.NewMsg(natsbus.Subject(bus.Events, "c0"))
				m.Data = msgs[j].Data
				if _, err := js.PublishMsgAsync(m, jetstream.WithMsgID(fmt.Sprintf("b%d-%d", i, j)), jetstream.WithStallWait(10*time.Second)); err != nil {
					b.Fatal(err)
				}
			}
			<-js.PublishAsyncComplete()
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
	})
	b.Run("bus", func(b *testing.B) {
		bb := openBench(b)
		batch := make([]bus.Message, benchBatch)
		copy(batch, msgs)
		b.SetBytes(int64(len(msgs[0].Data)))
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i += benchBatch {
			for j := range batch {
				batch[j].ID = fmt.Sprintf("b%d-%d", i, j)
			}
			if err := bb.Publish(context.Background(), batch...); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
	})
}

// BenchmarkConsume compares Consume+Ack through the bus with plain jetstream Messages()+Ack.
func BenchmarkConsume(b *testing.B) {
	fill := func(b *testing.B, bb benchBus, n int) {
		msgs := bustest.Messages(bus.Events, "bc", benchBatch, 1)
		for i := 0; i < n; i += benchBatch {
			for j := range msgs {
				msgs[j].ID = fmt.Sprintf("c%d-%d", i, j)
			}
			if err := bb.Publish(context.Background(), msgs...); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("baseline=nats.go", func(b *testing.B) {
		bb := openBench(b)
		fill(b, bb, b.N)
		js, _ := jetstream.New(bb.conn(b))
		cons, err := js.CreateOrUpdateConsumer(context.Background(), natsbus.StreamName(bus.Events), jetstream.ConsumerConfig{
			Durable: "base", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 4096,
		})
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(1200)
		b.ReportAllocs()
		b.ResetTimer()
		it, err := cons.Messages(jetstream.PullMaxMessages(1000))
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < b.N; i++ {
			m, err := it.Next()
			if err != nil {
				b.Fatal(err)
			}
			_ = m.Ack()
		}
		b.StopTimer()
		it.Stop()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
	})
	b.Run("bus", func(b *testing.B) {
		bb := openBench(b)
		fill(b, bb, b.N)
		c, _ := bb.Consumer(bus.Events, "bench", bus.ConsumerOptions{})
		ctx, cancel := context.WithCancel(context.Background())
		n := 0
		done := make(chan struct{})
		b.SetBytes(1200)
		b.ReportAllocs()
		b.ResetTimer()
		go func() {
			_ = c.Consume(ctx, func(ctx context.Context, d *bus.Delivery) {
				_ = d.Ack(ctx)
				if n++; n == b.N {
					close(done)
				}
			})
		}()
		<-done
		b.StopTimer()
		cancel()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
	})
}

type benchBus struct {
	*natsbus.Bus
	url string
}

func (bb benchBus) conn(b *testing.B) *nats.Conn {
	nc, err := nats.Connect(bb.url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	return nc
}

// openBench starts an embedded server on a loopback port so the baseline client can connect
// to the same server the bus uses.
func openBench(b *testing.B) benchBus {
	dir := b.TempDir()
	bb, err := natsbus.Open(context.Background(), natsbus.Config{URL: natsbus.Embedded, StoreDir: dir, EmbeddedListen: "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = bb.Close() })
	return benchBus{Bus: bb, url: bb.ClientURL()}
}
