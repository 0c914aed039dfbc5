package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/auditlens/internal/procstat"
	"github.com/auditlens/auditlens/services/report/chtest"
)

// BenchmarkServicesMemory runs ingest, classify and report as separate processes, as
// deployed (NATS JetStream in the test process, a ClickHouse server), over generated audit
// logs of two sizes, and reports each process's peak resident memory (VmHWM): the per-binary
// bounds the README states. At the larger size it also reports each peak as a multiple of the
// smaller size's (…-peak-rss-x-50MB): about 1.0 when memory does not grow with the input.
// It reports; it asserts nothing about them.
//
//	flock /work/bench.lock go test -run '^$' -bench ServicesMemory -benchtime 1x ./e2e/
func BenchmarkServicesMemory(b *testing.B) {
	ch := chtest.StartServer(b)
	first := map[string]int64{} // peak of each process at the smallest input
	for _, mb := range []int{50, 200} {
		b.Run(fmt.Sprintf("input=%dMB", mb), func(b *testing.B) {
			dir := b.TempDir()
			input := filepath.Join(dir, "audit.log")
			// One copy of examples/audit.log is ~140 KB.
			lines := writeInput(b, input, mb*1024/140)
			st, _ := os.Stat(input)
			b.SetBytes(st.Size())
			for i := range b.N {
				peak := runServices(b, filepath.Join(dir, strconv.Itoa(i)), input, lines, ch.DSN(fmt.Sprintf("mem%d_%d", mb, i)))
				for name, v := range peak {
					b.ReportMetric(float64(v)/(1<<20), name+"-peak-rss-MB")
					// Memory independent of input size reads ~1.0 here: 4x the input
					// should not take more than the smallest one did.
					if base, ok := first[name]; ok {
						b.ReportMetric(float64(v)/float64(base), name+"-peak-rss-x-50MB")
					} else if i == 0 {
						first[name] = v
					}
				}
				b.ReportMetric(float64(st.Size())/(1<<20), "input-MB")
			}
		})
	}
}

// runServices runs the three services until report has written every finding of input,
// and returns each one's peak resident memory in bytes.
func runServices(b *testing.B, dir, input string, lines int, dsn string) map[string]int64 {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	natsAddr := freeAddr(b)
	srv, err := natsbus.StartServer(filepath.Join(dir, "nats"), natsAddr)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	addr := map[string]string{"ingest": freeAddr(b), "classify": freeAddr(b), "report": freeAddr(b)}
	common := func(name string) []string {
		return []string{"--cluster", "mem", "--log-format", "json", "--log-level", "warn", "--nats-url", "nats://" + natsAddr, "--metrics-addr", addr[name]}
	}
	procs := map[string]*proc{
		"ingest":   start(b, dir, "ingest", append([]string{"--audit-log", input, "--checkpoint-dir", filepath.Join(dir, "cp")}, common("ingest")...)...),
		"classify": start(b, dir, "classify", common("classify")...),
		"report":   start(b, dir, "report", append([]string{"--clickhouse-dsn", dsn, "--retention-days", "0"}, common("report")...)...),
	}
	last, stable := -1.0, 0
	testkit.Eventually(b, 30*time.Minute, "every finding written", func() bool {
		time.Sleep(400 * time.Millisecond)
		in, cl, rp := procstat.Scrape(addr["ingest"]), procstat.Scrape(addr["classify"]), procstat.Scrape(addr["report"])
		classified := cl["auditlens_classify_events_total"]
		if classified == last {
			stable++
		} else {
			last, stable = classified, 0
		}
		return in["auditlens_ingest_lines_read_total"] >= float64(lines) && stable >= 5 && cl["auditlens_classify_findings_total"] > 0 &&
			rp["auditlens_report_findings_written_total"] >= cl["auditlens_classify_findings_total"] && rp["auditlens_report_pending_findings"] == 0
	})
	peak := map[string]int64{}
	for name, p := range procs {
		hwm, _, err := procstat.Memory(p.cmd.Process.Pid)
		if err != nil {
			b.Skip(err)
		}
		peak[name] = hwm
	}
	return peak
}
