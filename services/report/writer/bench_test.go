package writer

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	rtmetrics "runtime/metrics"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/auditlens/auditlens/lib/bus"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/store"
)

// benchFindings is how many findings one benchmark iteration moves.
const benchFindings = 500_000

// benchMessageBytes bounds a batch message as classify's default does
// (--classify-findings-message-bytes): about 45 of these findings.
const benchMessageBytes = 32 << 10

// realistic returns a finding like classify emits for a removed API (~700 bytes).
func realistic(i int) *auditlensv1.Finding {
	at := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Millisecond)
	return &auditlensv1.Finding{RuleId: "removed-api", Severity: auditlensv1.Severity_SEVERITY_CRITICAL,
		Cluster: "prod", AuditId: fmt.Sprintf("5c1d0a7e-3f0b-4a8e-9d51-%012d", i),
		EventTime: timestamppb.New(at), RequestReceived: at.Unix(),
		Verb: "list", RequestUri: "/apis/extensions/v1beta1/namespaces/team-a/ingresses?limit=500&resourceVersion=0",
		ApiGroup: "extensions", ApiVersion: "v1beta1", Resource: "ingresses", Namespace: fmt.Sprintf("team-%d", i%50),
		Username:  fmt.Sprintf("system:serviceaccount:team-%d:ingress-controller", i%50),
		UserAgent: "nginx-ingress-controller/v0.34.1 (linux/amd64) ingress-nginx/c3ce1e7b5b1e0f6bd7d8e7e0e8d9bd3a2b3c8e1f",
		SourceIp:  fmt.Sprintf("10.1.%d.%d", i%200, i%250), ResponseCode: 200, DeprecatedIn: "1.14", RemovedIn: "1.22",
		Replacement: "networking.k8s.io/v1", Stage: "ResponseComplete", Node: "master-1",
		Message:    "extensions/v1beta1 ingresses was removed in Kubernetes 1.22: migrate the client to networking.k8s.io/v1 before upgrading.",
		Confidence: auditlensv1.Confidence_CONFIDENCE_HIGH,
		Evidence:   []*auditlensv1.Evidence{{Path: "objectRef.apiGroup", Value: "extensions"}, {Path: "objectRef.apiVersion", Value: "v1beta1"}}}
}

// publishFindings puts n realistic findings on the bus, one per message (the format before
// batches) or, with batched, in FindingBatch messages of at most benchMessageBytes.
func publishFindings(b testing.TB, bb bus.Bus, prefix string, n int, batched bool) {
	b.Helper()
	const chunk = 5000
	var msgs []bus.Message
	var batch auditlensv1.FindingBatch
	size := 0
	seal := func() {
		data, err := proto.Marshal(&batch)
		if err != nil {
			b.Fatal(err)
		}
		msgs = append(msgs, bus.Message{Stream: bus.Findings, Cluster: "prod", ID: fmt.Sprintf("%s-%d", prefix, len(msgs)), Data: data,
			Header: map[string]string{auditlensv1.MessageTypeHeader: auditlensv1.FindingBatchMessageType}})
		batch.Findings, size = nil, 0
	}
	for i := range n {
		f := realistic(i)
		if batched {
			if s := proto.Size(f) + 3; size+s > benchMessageBytes && size > 0 {
				seal()
			}
			batch.Findings = append(batch.Findings, f)
			size += proto.Size(f) + 3
			if i == n-1 {
				seal()
			}
			continue
		}
		data, err := proto.Marshal(f)
		if err != nil {
			b.Fatal(err)
		}
		msgs = append(msgs, bus.Message{Stream: bus.Findings, Cluster: "prod", ID: fmt.Sprintf("%s-%d", prefix, i), Data: data})
	}
	for len(msgs) > 0 {
		k := min(chunk, len(msgs))
		if err := bb.Publish(context.Background(), msgs[:k]...); err != nil {
			b.Fatal(err)
		}
		msgs = msgs[k:]
	}
}

// cpuMeter adds up the CPU time of this process and of the ClickHouse server over the timed
// parts of a benchmark.
type cpuMeter struct {
	srv                 *chtest.Server
	proc, server        time.Duration
	procStart, srvStart time.Duration
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (m *cpuMeter) start() {
	m.procStart = processCPU()
	if m.srv != nil {
		m.srvStart = m.srv.CPU()
	}
}

func (m *cpuMeter) stop() {
	m.proc += processCPU() - m.procStart
	if m.srv != nil {
		m.server += m.srv.CPU() - m.srvStart
	}
}

// report adds findings/s and the CPU spent per finding by this process (decoding, the
// ClickHouse client, and the embedded NATS server) and by the ClickHouse server.
func (m *cpuMeter) report(b *testing.B) {
	n := float64(benchFindings) * float64(b.N)
	b.ReportMetric(n/b.Elapsed().Seconds(), "findings/s")
	b.ReportMetric(float64(m.proc.Microseconds())/n, "process-us/finding")
	if m.srv != nil {
		b.ReportMetric(float64(m.server.Microseconds())/n, "server-us/finding")
	}
}

// BenchmarkBusToClickHouse measures findings/s from the bus (embedded NATS) into a
// ClickHouse 18.16 server through the report writer (default --report-batch-size), beside two
// baselines in the same run: the bus alone (consume, decode into blocks, ack) and the store
// alone (pre-decoded blocks of --report-batch-size findings into findings and its three rollups).
// Findings travel in FindingBatch messages of up to 32 KiB, as classify publishes them;
// "bus-to-clickhouse-single" is the format before batches (one Finding per message).
// peak-live-MB is the most live Go heap (as of a GC) seen while the writer ran, base-live-MB
// the live heap just before it started: the embedded NATS server holding the stream.
//
//	go test -run '^$' -bench BusToClickHouse -benchtime 3x ./writer/
func BenchmarkBusToClickHouse(b *testing.B) {
	srv, st := chtest.ServerStore(b)
	b.Run("bus-only", func(b *testing.B) {
		m := cpuMeter{}
		for b.Loop() {
			b.StopTimer()
			bb := openBus(b)
			group := "bench"
			publishFindings(b, bb, group, benchFindings, true)
			cons, err := bb.Consumer(bus.Findings, group, bus.ConsumerOptions{MaxUnacked: 20000})
			if err != nil {
				b.Fatal(err)
			}
			var got atomic.Int64
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			var blk store.Block
			b.StartTimer()
			m.start()
			go func() {
				defer close(done)
				_ = cons.Consume(ctx, func(_ context.Context, d *bus.Delivery) {
					n, err := blk.AppendBatch(d.Data, d.Cluster, func(_ int, _ []byte, err error) error { return err })
					if err != nil {
						b.Error(err)
					}
					if blk.Len() >= DefaultBatchSize {
						blk.Reset()
					}
					_ = d.Ack(ctx)
					if got.Add(int64(n)) == benchFindings {
						cancel()
					}
				})
			}()
			<-done
			cancel()
			m.stop()
			b.StopTimer()
			_ = bb.Close()
			b.StartTimer()
		}
		m.report(b)
	})
	b.Run("store-only", func(b *testing.B) {
		var blocks []*store.Block
		for i := 0; i < benchFindings; i += DefaultBatchSize {
			blk := new(store.Block)
			for j := i; j < min(i+DefaultBatchSize, benchFindings); j++ {
				data, err := proto.Marshal(realistic(j))
				if err != nil {
					b.Fatal(err)
				}
				if err := blk.AppendWire(data, ""); err != nil {
					b.Fatal(err)
				}
			}
			blocks = append(blocks, blk)
		}
		m := cpuMeter{srv: srv}
		for b.Loop() {
			m.start()
			for _, blk := range blocks {
				if err := st.WriteBlock(context.Background(), blk); err != nil {
					b.Fatal(err)
				}
			}
			m.stop()
		}
		m.report(b)
	})
	for _, batched := range []bool{true, false} {
		name := "bus-to-clickhouse"
		if !batched {
			name += "-single"
		}
		b.Run(name, func(b *testing.B) {
			c := testConfig()
			c.BatchSize = DefaultBatchSize
			c.MaxWait = 200 * time.Millisecond
			m := cpuMeter{srv: srv}
			var peak, base uint64
			for b.Loop() {
				b.StopTimer()
				bb := openBus(b)
				publishFindings(b, bb, "report", benchFindings, batched)
				st2 := chtest.OpenMigrated(b, srv.DSN(store.DefaultDatabase))
				w, err := New(c, st2, bb, slog.New(slog.DiscardHandler), nil)
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				runtime.GC()
				base = heapLive()
				b.StartTimer()
				m.start()
				go func() { done <- w.Run(ctx) }()
				for testutil.ToFloat64(w.m.written) < benchFindings {
					time.Sleep(5 * time.Millisecond)
					peak = max(peak, heapLive())
				}
				m.stop()
				b.StopTimer()
				cancel()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				_ = bb.Close()
				b.StartTimer()
			}
			m.report(b)
			b.ReportMetric(float64(peak)/(1<<20), "peak-live-MB")
			b.ReportMetric(float64(base)/(1<<20), "base-live-MB")
		})
	}
}

// heapLive is the live Go heap at the last GC, the embedded NATS server's included.
func heapLive() uint64 {
	s := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64()
}
