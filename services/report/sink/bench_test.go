package sink

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
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
const benchFindings = 200_000

// realistic returns a finding like classify emits for a removed API (~700 bytes).
func realistic(i int) *auditlensv1.Finding {
	return &auditlensv1.Finding{RuleId: "removed-api", Severity: auditlensv1.Severity_SEVERITY_CRITICAL,
		Cluster: "prod", AuditId: fmt.Sprintf("5c1d0a7e-3f0b-4a8e-9d51-%012d", i),
		EventTime: timestamppb.New(time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Millisecond)),
		Verb:      "list", RequestUri: "/apis/extensions/v1beta1/namespaces/team-a/ingresses?limit=500&resourceVersion=0",
		ApiGroup: "extensions", ApiVersion: "v1beta1", Resource: "ingresses", Namespace: fmt.Sprintf("team-%d", i%50),
		Username:  fmt.Sprintf("system:serviceaccount:team-%d:ingress-controller", i%50),
		UserAgent: "nginx-ingress-controller/v0.34.1 (linux/amd64) ingress-nginx/c3ce1e7b5b1e0f6bd7d8e7e0e8d9bd3a2b3c8e1f",
		SourceIp:  fmt.Sprintf("10.1.%d.%d", i%200, i%250), ResponseCode: 200, DeprecatedIn: "1.14", RemovedIn: "1.22",
		Replacement: "networking.k8s.io/v1", Stage: "ResponseComplete", Node: "master-1",
		Message:    "extensions/v1beta1 ingresses was removed in Kubernetes 1.22: migrate the client to networking.k8s.io/v1 before upgrading.",
		Confidence: auditlensv1.Confidence_CONFIDENCE_HIGH,
		Evidence:   []*auditlensv1.Evidence{{Path: "objectRef.apiGroup", Value: "extensions"}, {Path: "objectRef.apiVersion", Value: "v1beta1"}}}
}

func publishFindings(b *testing.B, bb bus.Bus, prefix string, n int) {
	publishFindingsT(b, bb, prefix, n)
}

func publishFindingsT(b testing.TB, bb bus.Bus, prefix string, n int) {
	b.Helper()
	const chunk = 5000
	msgs := make([]bus.Message, 0, chunk)
	for i := range n {
		data, err := proto.Marshal(realistic(i))
		if err != nil {
			b.Fatal(err)
		}
		msgs = append(msgs, bus.Message{Stream: bus.Findings, Cluster: "prod", ID: fmt.Sprintf("%s-%d", prefix, i), Data: data})
		if len(msgs) == chunk || i == n-1 {
			if err := bb.Publish(context.Background(), msgs...); err != nil {
				b.Fatal(err)
			}
			msgs = msgs[:0]
		}
	}
}

// BenchmarkBusToClickHouse measures findings/s from the bus (embedded NATS) into a
// ClickHouse 18.16 server through the report writer, beside two baselines in the same run:
// the bus alone (consume, decode, ack) and the store alone (WriteFindings in 10k blocks).
//
//	go test -run '^$' -bench BusToClickHouse -benchtime 3x ./sink/
func BenchmarkBusToClickHouse(b *testing.B) {
	srv, st := chtest.ServerStore(b)
	b.Run("bus-only", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			bb := openBus(b)
			group := "bench"
			publishFindings(b, bb, group, benchFindings)
			cons, err := bb.Consumer(bus.Findings, group, bus.ConsumerOptions{MaxUnacked: 20000})
			if err != nil {
				b.Fatal(err)
			}
			var got atomic.Int64
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			b.StartTimer()
			go func() {
				defer close(done)
				_ = cons.Consume(ctx, func(_ context.Context, d *bus.Delivery) {
					var f auditlensv1.Finding
					if err := proto.Unmarshal(d.Data, &f); err != nil {
						b.Error(err)
					}
					_ = d.Ack(ctx)
					if got.Add(1) == benchFindings {
						cancel()
					}
				})
			}()
			<-done
			cancel()
			b.StopTimer()
			_ = bb.Close()
			b.StartTimer()
		}
		b.ReportMetric(float64(benchFindings)*float64(b.N)/b.Elapsed().Seconds(), "findings/s")
	})
	b.Run("store-only", func(b *testing.B) {
		fs := make([]*auditlensv1.Finding, benchFindings)
		for i := range fs {
			fs[i] = realistic(i)
		}
		for b.Loop() {
			for i := 0; i < len(fs); i += 10000 {
				if err := st.WriteFindings(context.Background(), fs[i:i+10000]); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(benchFindings)*float64(b.N)/b.Elapsed().Seconds(), "findings/s")
	})
	b.Run("bus-to-clickhouse", func(b *testing.B) {
		c := testConfig()
		c.BatchSize = 10000
		c.MaxWait = 200 * time.Millisecond
		for b.Loop() {
			b.StopTimer()
			bb := openBus(b)
			publishFindings(b, bb, "report", benchFindings)
			st2 := chtest.OpenMigrated(b, srv.DSN(store.DefaultDatabase))
			w, err := NewWriter(c, st2, bb, slog.New(slog.DiscardHandler), nil)
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			b.StartTimer()
			go func() { done <- w.Run(ctx) }()
			for testutil.ToFloat64(w.m.written) < benchFindings {
				time.Sleep(5 * time.Millisecond)
			}
			b.StopTimer()
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			_ = bb.Close()
			b.StartTimer()
		}
		b.ReportMetric(float64(benchFindings)*float64(b.N)/b.Elapsed().Seconds(), "findings/s")
	})
}
