package file_test

import (
	"bufio"
	"context"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/lib/enginetest"
	"github.com/auditlens/auditlens/lib/transport"
	"github.com/auditlens/auditlens/services/ingest"
	"github.com/auditlens/auditlens/services/ingest/file"
	"github.com/auditlens/auditlens/services/ingest/input"
	"github.com/auditlens/auditlens/services/ingest/internal/testlog"
	"github.com/auditlens/auditlens/services/ingest/metrics"
	"github.com/auditlens/auditlens/services/ingest/tail"
)

// benchLog writes n events (about 1.2 KB each) to a fresh audit log and returns its path
// and average line size.
func benchLog(b *testing.B, n int) (string, int64) {
	b.Helper()
	ev := testlog.Load(b)
	path := filepath.Join(b.TempDir(), "audit.log")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var size int64
	for i := 0; i < n; i++ {
		line, _ := ev.Event(i)
		_, _ = w.Write(line) // a failed write shows in w.Flush below
		_ = w.WriteByte('\n')
		size += int64(len(line)) + 1
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	return path, size / int64(n)
}

// BenchmarkFile compares, on the same file: reading its lines (the baseline), following it
// and identifying every event (no bus), and the whole file input up to acknowledged
// JetStream messages on an embedded server, one message per event or in batches.
func BenchmarkFile(b *testing.B) {
	b.Run("raw-read", func(b *testing.B) {
		path, avg := benchLog(b, b.N)
		b.SetBytes(avg)
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		n := 0
		for sc.Scan() {
			n++
		}
		if n != b.N {
			b.Fatalf("%d lines", n)
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
	})
	b.Run("tail+peek", func(b *testing.B) {
		path, avg := benchLog(b, b.N)
		b.SetBytes(avg)
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		cfg := tail.DefaultConfig()
		cfg.Path = path
		f := tail.New(cfg, nil)
		defer f.Close()
		n := 0
		for n < b.N {
			c, err := f.Next(context.Background(), 4096, 8<<20, false)
			if err != nil {
				b.Fatal(err)
			}
			for _, l := range c.Lines {
				if _, err := auditevent.Peek(l.Data, 1<<20); err != nil {
					b.Fatal(err)
				}
				n++
			}
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
	})
	// gogc=400 with memlimit is how the ingest binary runs (ingest.GCPercent,
	// Config.MemoryLimit plus the embedded server's share), gogc=100 Go's default.
	// one-per-event is the format before batches (--bus-batch-max-events 1), the baseline of
	// the batched cases run beside it.
	perEvent := eventbatch.Config{MaxEvents: 1, MaxBytes: 1, Compression: eventbatch.CompressionNone}
	s2, zstd := eventbatch.DefaultConfig(), eventbatch.DefaultConfig()
	zstd.Compression = eventbatch.CompressionZstd
	for _, tc := range []struct {
		name       string
		listen     string
		publishers int
		batch      int
		gcPercent  int
		memLimit   bool
		events     eventbatch.Config
	}{
		{"file-to-jetstream/in-process/gogc=100/one-per-event", "", 2, 4096, 100, false, perEvent},
		{"file-to-jetstream/in-process/gogc=400/one-per-event", "", 2, 4096, ingest.GCPercent, false, perEvent},
		{"file-to-jetstream/in-process/gogc=400/memlimit/one-per-event", "", 2, 4096, ingest.GCPercent, true, perEvent},
		{"file-to-jetstream/tcp/gogc=400/memlimit/one-per-event", "127.0.0.1:0", 2, 4096, ingest.GCPercent, true, perEvent},
		{"file-to-jetstream/tcp/publishers=4/batch=1024/gogc=400/memlimit/one-per-event", "127.0.0.1:0", 4, 1024, ingest.GCPercent, true, perEvent},
		{"file-to-jetstream/in-process/gogc=400/memlimit/batches-s2", "", 2, 4096, ingest.GCPercent, true, s2},
		{"file-to-jetstream/in-process/gogc=400/memlimit/batches-zstd", "", 2, 4096, ingest.GCPercent, true, zstd},
		{"file-to-jetstream/tcp/gogc=400/memlimit/batches-s2", "127.0.0.1:0", 2, 4096, ingest.GCPercent, true, s2},
	} {
		b.Run(tc.name, func(b *testing.B) {
			defer debug.SetGCPercent(debug.SetGCPercent(tc.gcPercent))
			limit := int64(math.MaxInt64)
			if tc.memLimit {
				cfg := ingest.DefaultConfig(b.TempDir())
				cfg.File.Path, cfg.File.Publishers = "audit.log", tc.publishers
				limit = cfg.MemoryLimit() + daemon.EmbeddedNATSMemory(transport.EmbeddedDedupWindow)
			}
			defer debug.SetMemoryLimit(debug.SetMemoryLimit(limit))
			benchFileToJetStream(b, tc.listen, tc.publishers, tc.batch, tc.events)
		})
	}
}

func benchFileToJetStream(b *testing.B, listen string, publishers, batch int, events eventbatch.Config) {
	{
		path, avg := benchLog(b, b.N)
		bs, err := natsbus.Open(context.Background(), natsbus.Config{URL: natsbus.Embedded, StoreDir: b.TempDir(), EmbeddedListen: listen, Duplicates: transport.EmbeddedDedupWindow})
		if err != nil {
			enginetest.Unavailable(b, "embedded nats", err)
		}
		defer bs.Close()
		m := metrics.New(nil)
		cfg := file.Config{Path: path, CheckpointDir: b.TempDir(), StartAt: tail.StartBeginning, PollInterval: 5 * time.Millisecond,
			BatchSize: batch, BatchBytes: 8 << 20, Publishers: publishers, DrainTimeout: 30 * time.Second}
		in, err := file.New(cfg, input.MustEnv(input.Env{Bus: bs, Cluster: "bench", Node: "bench", MaxEventSize: 1000000, Logger: slog.New(slog.DiscardHandler), Metrics: m, Batch: events}))
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(avg)
		b.ReportAllocs()
		b.ResetTimer()
		start, startCPU := time.Now(), cpuTime()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- in.Run(ctx) }()
		published := m.Published.WithLabelValues(metrics.File)
		for int(testutil.ToFloat64(published)) < b.N {
			time.Sleep(time.Millisecond)
		}
		elapsed, cpu := time.Since(start), cpuTime()-startCPU
		b.StopTimer()
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/event")
	}
}
