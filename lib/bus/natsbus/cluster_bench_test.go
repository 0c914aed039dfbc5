package natsbus_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/bustest"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/bus/natsbus/natscluster"
)

// openFresh deletes the streams of the cluster and opens a bus that creates them again with
// replicas.
func openFresh(b *testing.B, c *natscluster.Cluster, replicas int) *natsbus.Bus {
	b.Helper()
	js := admin(b, c)
	for _, s := range bus.Streams {
		if err := js.DeleteStream(context.Background(), natsbus.StreamName(s)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			b.Fatal(err)
		}
	}
	bb, err := natsbus.Open(context.Background(), natsbus.Config{URL: c.URLs(), Replicas: replicas})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = bb.Close() })
	return bb
}

// BenchmarkClusterPublish publishes ~1.2 KB messages in batches of 1000 through the bus to a
// 3-server cluster on loopback: streams with 1 replica (the baseline) and with 3, in the same
// run on the same servers.
func BenchmarkClusterPublish(b *testing.B) {
	c := natscluster.Start(b, 3)
	for _, replicas := range []int{1, 3} {
		name := fmt.Sprintf("replicas=%d", replicas)
		if replicas == 1 {
			name = "baseline=" + name
		}
		b.Run(name, func(b *testing.B) {
			bb := openFresh(b, c, replicas)
			batch := bustest.Messages(bus.Events, "cp", benchBatch, 1)
			b.SetBytes(int64(len(batch[0].Data)))
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
}

// BenchmarkClusterConsume consumes and acknowledges through the bus what was published to a
// 3-server cluster, streams with 1 replica (the baseline) and with 3, in the same run.
func BenchmarkClusterConsume(b *testing.B) {
	c := natscluster.Start(b, 3)
	for _, replicas := range []int{1, 3} {
		name := fmt.Sprintf("replicas=%d", replicas)
		if replicas == 1 {
			name = "baseline=" + name
		}
		b.Run(name, func(b *testing.B) {
			bb := openFresh(b, c, replicas)
			msgs := bustest.Messages(bus.Events, "cc", benchBatch, 1)
			for i := 0; i < b.N; i += benchBatch {
				for j := range msgs {
					msgs[j].ID = fmt.Sprintf("c%d-%d", i, j)
				}
				if err := bb.Publish(context.Background(), msgs...); err != nil {
					b.Fatal(err)
				}
			}
			cons, err := bb.Consumer(bus.Events, "bench", bus.ConsumerOptions{})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			n := 0
			done := make(chan struct{})
			consumed := make(chan error, 1)
			b.SetBytes(1200)
			b.ReportAllocs()
			b.ResetTimer()
			go func() {
				consumed <- cons.Consume(ctx, func(ctx context.Context, d *bus.Delivery) {
					_ = d.Ack(ctx)
					if n++; n == b.N {
						close(done)
					}
				})
			}()
			<-done
			b.StopTimer()
			cancel()
			if err := <-consumed; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
		})
	}
}
