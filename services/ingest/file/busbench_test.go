package file_test

import (
	"context"
	"runtime/debug"
	"strconv"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/enginetest"
	"github.com/auditlens/auditlens/services/ingest"
	"github.com/auditlens/auditlens/services/ingest/internal/testlog"
)

// BenchmarkPublish is the bus alone: batches of ~1.2 KB events published to an embedded
// JetStream and acknowledged, the ceiling of the file input.
func BenchmarkPublish(b *testing.B) {
	for _, tc := range []struct {
		batch     int
		listen    string
		gcPercent int
	}{{512, "", 100}, {4096, "", 100}, {4096, "", ingest.GCPercent}, {4096, "127.0.0.1:0", ingest.GCPercent}} {
		name := "batch=" + strconv.Itoa(tc.batch)
		if tc.listen != "" {
			name += "/tcp"
		}
		name += "/gogc=" + strconv.Itoa(tc.gcPercent)
		batch := tc.batch
		b.Run(name, func(b *testing.B) {
			defer debug.SetGCPercent(debug.SetGCPercent(tc.gcPercent))
			ev := testlog.Load(b)
			bs, err := natsbus.Open(context.Background(), natsbus.Config{URL: natsbus.Embedded, StoreDir: b.TempDir(), EmbeddedListen: tc.listen})
			if err != nil {
				enginetest.Unavailable(b, "embedded nats", err)
			}
			defer bs.Close()
			msgs := make([]bus.Message, 0, b.N)
			for i := 0; i < b.N; i++ {
				line, id := ev.Event(i)
				msgs = append(msgs, bus.Message{Stream: bus.Events, Cluster: "bench", ID: id, Data: line,
					Header: map[string]string{bus.HeaderNode: "n"}})
			}
			b.SetBytes(int64(len(msgs[0].Data)))
			b.ReportAllocs()
			b.ResetTimer()
			start, startCPU := time.Now(), cpuTime()
			for i := 0; i < len(msgs); i += batch {
				if err := bs.Publish(context.Background(), msgs[i:min(i+batch, len(msgs))]...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
			b.ReportMetric(float64((cpuTime()-startCPU).Nanoseconds())/float64(b.N), "cpu-ns/event")
		})
	}
}
