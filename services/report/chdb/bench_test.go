package chdb_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
)

// BenchmarkWriteFindings measures embedded inserts: findings/s in 10k-finding blocks.
//
//	go test -run '^$' -bench WriteFindings -benchtime 20x ./chdb/
func BenchmarkWriteFindings(b *testing.B) {
	st := chtest.EmbeddedStore(b)
	batch := make([]*auditlensv1.Finding, 10000)
	t0 := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	i := 0
	for b.Loop() {
		for j := range batch {
			i++
			batch[j] = &auditlensv1.Finding{RuleId: "removed-api", Cluster: "prod", AuditId: fmt.Sprintf("a%d", i),
				EventTime: timestamppb.New(t0.Add(time.Duration(i) * time.Millisecond)),
				Username:  fmt.Sprintf("system:serviceaccount:ns%d:sa", i%300), UserAgent: "client-go/v0.29.0 (linux/amd64) kubernetes/abcdef",
				Namespace: fmt.Sprintf("ns%d", i%300), RemovedIn: "1.22", ApiGroup: "extensions", ApiVersion: "v1beta1", Resource: "ingresses",
				RequestUri: "/apis/extensions/v1beta1/namespaces/team-a/ingresses", Message: "extensions/v1beta1 ingresses was removed in 1.22: use networking.k8s.io/v1."}
		}
		if err := st.WriteFindings(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(batch))*float64(b.N)/b.Elapsed().Seconds(), "findings/s")
}
