package e2e

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/auditlens/internal/procstat"
	"github.com/auditlens/auditlens/services/report/chtest"
)

// BenchmarkPipelineThroughput runs ingest, classify and report as processes over a
// nats-server (the binaries TestMain built) into ClickHouse 18.16, on one audit log of ~200k
// genuine events, from ingest's start until classify has classified every event (events/s)
// and until report has written every finding (stored-events/s), and reports the processor
// time per event of each process. The cases differ only in how ingest publishes: one message
// per event (the format before batches, --bus-batch-max-events 1: the baseline), and
// EventBatch messages with each compression.
//
//	flock /work/bench.lock go test -run '^$' -bench PipelineThroughput -benchtime 1x ./e2e/
func BenchmarkPipelineThroughput(b *testing.B) {
	ch := chtest.StartServer(b)
	input := filepath.Join(b.TempDir(), "audit.log")
	events := writeInput(b, input, 1200)
	// examples/audit.log repeats a few events (same auditID and stage): one message per event
	// stores each once (the bus de-duplicates their ids), a batch carries them all (classify
	// counts their findings once).
	distinct := distinctEvents(b, input)
	for i, tc := range []struct {
		name   string
		args   []string
		events int // classify sees
	}{
		{"one-message-per-event", []string{"--bus-batch-max-events", "1"}, distinct},
		{"batches/s2", []string{"--bus-batch-compression", "s2"}, events},
		{"batches/none", []string{"--bus-batch-compression", "none"}, events},
		{"batches/zstd", []string{"--bus-batch-compression", "zstd"}, events},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				r := runThroughput(b, input, tc.events, ch.DSN(fmt.Sprintf("throughput%d_%d", i, time.Now().UnixNano())), tc.args)
				b.ReportMetric(float64(events)/r.elapsed.Seconds(), "events/s")
				b.ReportMetric(float64(events)/r.stored.Seconds(), "stored-events/s")
				per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 / float64(events) }
				b.ReportMetric(per(r.ingest), "ingest-cpu-us/event")
				b.ReportMetric(per(r.classify), "classify-cpu-us/event")
				b.ReportMetric(per(r.nats), "nats-cpu-us/event")
				b.ReportMetric(per(r.report), "report-cpu-us/event")
				b.ReportMetric(per(r.ingest+r.classify+r.nats+r.report), "cpu-us/event")
			}
		})
	}
}

// distinctEvents counts the distinct (auditID, stage) of the audit log at path.
func distinctEvents(b *testing.B, path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	seen := map[string]bool{}
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		ref, err := auditevent.Peek(line, 0)
		if err != nil {
			b.Fatal(err)
		}
		seen[ref.AuditID+"/"+ref.Stage] = true
	}
	return len(seen)
}

type throughput struct {
	elapsed, stored                time.Duration // until classified, until written
	ingest, classify, nats, report time.Duration // processor time
}

func runThroughput(b *testing.B, input string, events int, dsn string, ingestArgs []string) throughput {
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
	classifyMetrics, reportMetrics := freeAddr(b), freeAddr(b)
	classify := start(b, dir, "classify", append([]string{"--metrics-addr", classifyMetrics}, common...)...)
	report := start(b, dir, "report", append([]string{"--metrics-addr", reportMetrics, "--clickhouse-dsn", dsn, "--retention-days", "0"}, common...)...)
	testkit.Eventually(b, 60*time.Second, "classify and report serving metrics", func() bool {
		return len(procstat.Scrape(classifyMetrics)) > 0 && len(procstat.Scrape(reportMetrics)) > 0
	})
	cpu := func(p *proc) time.Duration {
		d, err := procstat.CPU(p.cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	classify0, nats0, report0 := cpu(classify), cpu(nats), cpu(report)
	begin := time.Now()
	ingest := start(b, dir, "ingest", append(append([]string{"--audit-log", input, "--checkpoint-dir", filepath.Join(dir, "cp"), "--metrics-addr", ""}, common...), ingestArgs...)...)
	deadline := time.Now().Add(5 * time.Minute)
	for procstat.Scrape(classifyMetrics)["auditlens_classify_events_total"] < float64(events) {
		if time.Now().After(deadline) {
			b.Fatalf("classify did not see %d events within 5 minutes (%v)", events, procstat.Scrape(classifyMetrics)["auditlens_classify_events_total"])
		}
		time.Sleep(10 * time.Millisecond)
	}
	r := throughput{elapsed: time.Since(begin)}
	cl := procstat.Scrape(classifyMetrics)
	if got := cl["auditlens_classify_events_total"]; got != float64(events) {
		b.Errorf("classify classified %v events, want %d", got, events)
	}
	for {
		rp := procstat.Scrape(reportMetrics)
		if rp["auditlens_report_findings_written_total"] >= cl["auditlens_classify_findings_total"] && rp["auditlens_report_pending_findings"] == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("report did not write %v findings within 5 minutes (%v)", cl["auditlens_classify_findings_total"], rp["auditlens_report_findings_written_total"])
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.stored = time.Since(begin)
	r.ingest, r.classify, r.nats, r.report = cpu(ingest), cpu(classify)-classify0, cpu(nats)-nats0, cpu(report)-report0
	fmt.Fprintf(b.Output(), "%d events classified in %s, their %v findings written in %s\n", events, r.elapsed.Round(time.Millisecond),
		cl["auditlens_classify_findings_total"], r.stored.Round(time.Millisecond))
	return r
}
