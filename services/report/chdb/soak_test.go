package chdb_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
)

// TestSoak is the evidence for running chDB inside the long-running report service: it
// writes findings in 10k blocks for $AUDITLENS_CHDB_SOAK (e.g. 5m) while two readers run the
// weekly-style aggregation, logs the process RSS over time, and checks the count is exact.
// It is skipped unless the variable is set.
//
//	AUDITLENS_CHDB_SOAK=5m go test -run TestSoak -v -timeout 30m ./chdb/
func TestSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("AUDITLENS_CHDB_SOAK"))
	if err != nil {
		t.Skip("set AUDITLENS_CHDB_SOAK to a duration to run the soak test")
	}
	st := chtest.EmbeddedStore(t)
	ctx := context.Background()
	var written, reads atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var readErr atomic.Value
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				rows, err := st.DB().QueryContext(ctx, `SELECT rule_id, username, user_agent, namespace, uniqExact(audit_id), min(event_time), max(event_time)
FROM findings WHERE cluster = ? GROUP BY rule_id, username, user_agent, namespace ORDER BY 5 DESC LIMIT 100`, "prod")
				if err != nil {
					readErr.Store(err)
					return
				}
				for rows.Next() {
				}
				rows.Close()
				reads.Add(1)
			}
		}()
	}
	start := time.Now()
	lastLog := start
	batch := make([]*auditlensv1.Finding, 10000)
	for i := 0; time.Since(start) < d; i++ {
		for j := range batch {
			n := i*len(batch) + j
			batch[j] = &auditlensv1.Finding{RuleId: "removed-api", Cluster: "prod", AuditId: fmt.Sprintf("a%d", n),
				EventTime: timestamppb.New(start.Add(time.Duration(n) * time.Millisecond)),
				Username:  fmt.Sprintf("system:serviceaccount:ns%d:sa", n%300), UserAgent: fmt.Sprintf("client-go/v0.%d", n%30),
				Namespace: fmt.Sprintf("ns%d", n%300), RemovedIn: "1.22", ApiGroup: "extensions", ApiVersion: "v1beta1", Resource: "ingresses"}
		}
		if err := st.WriteFindings(ctx, batch); err != nil {
			t.Fatalf("after %d findings: %v", written.Load(), err)
		}
		written.Add(int64(len(batch)))
		if time.Since(lastLog) >= 10*time.Second {
			lastLog = time.Now()
			t.Logf("%6.0fs: %d findings written (%.0f/s), %d reads, RSS %s", time.Since(start).Seconds(), written.Load(),
				float64(written.Load())/time.Since(start).Seconds(), reads.Load(), rss())
		}
	}
	close(stop)
	wg.Wait()
	if err, _ := readErr.Load().(error); err != nil {
		t.Fatalf("reader: %v", err)
	}
	var n uint64
	if err := st.DB().QueryRowContext(ctx, "SELECT uniqExact(cluster, rule_id, audit_id) FROM findings").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != uint64(written.Load()) {
		t.Errorf("%d findings counted, %d written", n, written.Load())
	}
	t.Logf("done: %d findings in %v (%.0f/s), %d reads, RSS %s", n, time.Since(start).Round(time.Second),
		float64(n)/time.Since(start).Seconds(), reads.Load(), rss())
}

func rss() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			return strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:"))
		}
	}
	return "?"
}
