package e2e

import (
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/auditlens/internal/procstat"
)

// BenchmarkPipelineThroughput runs ingest and classify as processes over a nats-server (the
// binaries TestMain built) on one audit log of ~200k genuine events, from ingest's start until
// classify has classified every event, and reports events/s and the processor time per event
// of each process. The cases differ only in how ingest publishes: one message per event (the
// format before batches, --bus-batch-max-events 1: the baseline), and EventBatch messages
// with each compression.
//
//	flock /work/bench.lock go test -run '^$' -bench PipelineThroughput -benchtime 1x ./e2e/
func BenchmarkPipelineThroughput(b *testing.B) {
	input := filepath.Join(b.TempDir(), "audit.log")
	events := writeInput(b, input, 1200)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"one-message-per-event", []string{"--bus-batch-max-events", "1"}},
		{"batches/s2", []string{"--bus-batch-compression", "s2"}},
		{"batches/none", []string{"--bus-batch-compression", "none"}},
		{"batches/zstd", []string{"--bus-batch-compression", "zstd"}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				r := runThroughput(b, input, events, tc.args)
				b.ReportMetric(float64(events)/r.elapsed.Seconds(), "events/s")
				per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 / float64(events) }
				b.ReportMetric(per(r.ingest), "ingest-cpu-us/event")
				b.ReportMetric(per(r.classify), "classify-cpu-us/event")
				b.ReportMetric(per(r.nats), "nats-cpu-us/event")
				b.ReportMetric(per(r.ingest+r.classify+r.nats), "cpu-us/event")
			}
		})
	}
}

type throughput struct {
	elapsed                time.Duration
	ingest, classify, nats time.Duration
}

func runThroughput(b *testing.B, input string, events int, ingestArgs []string) throughput {
	dir := b.TempDir()
	natsAddr := freeAddr(b)
	host, port, _ := net.SplitHostPort(natsAddr)
	nats := start(b, dir, "nats-server", "-js", "-sd", filepath.Join(dir, "nats"), "-a", host, "-p", port, "--server_name", "bench")
	testkit.Eventually(b, 30*time.Second, "nats-server listening", func() bool {
		c, err := net.Dial("tcp", natsAddr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	common := []string{"--cluster", "bench", "--log-format", "json", "--nats-url", "nats://" + natsAddr}
	classifyMetrics := freeAddr(b)
	classify := start(b, dir, "classify", append([]string{"--metrics-addr", classifyMetrics}, common...)...)
	testkit.Eventually(b, 30*time.Second, "classify serving metrics", func() bool { return len(procstat.Scrape(classifyMetrics)) > 0 })
	cpu := func(p *proc) time.Duration {
		d, err := procstat.CPU(p.cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	classify0, nats0 := cpu(classify), cpu(nats)
	begin := time.Now()
	ingest := start(b, dir, "ingest", append(append([]string{"--audit-log", input, "--checkpoint-dir", filepath.Join(dir, "cp"), "--metrics-addr", ""}, common...), ingestArgs...)...)
	deadline := time.Now().Add(5 * time.Minute)
	for procstat.Scrape(classifyMetrics)["auditlens_classify_events_total"] < float64(events) {
		if time.Now().After(deadline) {
			b.Fatalf("classify did not see %d events within 5 minutes (%v)", events, procstat.Scrape(classifyMetrics)["auditlens_classify_events_total"])
		}
		time.Sleep(10 * time.Millisecond)
	}
	r := throughput{elapsed: time.Since(begin), ingest: cpu(ingest), classify: cpu(classify) - classify0, nats: cpu(nats) - nats0}
	if got := procstat.Scrape(classifyMetrics)["auditlens_classify_events_total"]; got != float64(events) {
		b.Errorf("classify classified %v events, want %d", got, events)
	}
	fmt.Fprintf(b.Output(), "%d events in %s\n", events, r.elapsed.Round(time.Millisecond))
	return r
}
