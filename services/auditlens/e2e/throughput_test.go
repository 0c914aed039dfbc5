package e2e

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/enginetest"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/auditlens/internal/procstat"
	"github.com/auditlens/auditlens/services/report/chdb"
	"github.com/auditlens/auditlens/services/report/chtest"
)

var (
	throughputCopies   = flag.Int("throughput.copies", 1200, "BenchmarkPipelineThroughput, BenchmarkAllInOneThroughput: copies of examples/audit.log's 168 events in the input")
	throughputBaseline = flag.String("throughput.baseline", "", "BenchmarkPipelineThroughput, BenchmarkAllInOneThroughput: a directory of ingest, classify, report and auditlens binaries of another build, each case run with them too (name suffix /baseline) in the same run")
)

// builds are the binaries each throughput case runs: those TestMain built, then those of
// -throughput.baseline when set.
func builds() []struct{ suffix, dir string } {
	out := []struct{ suffix, dir string }{{"", bin}}
	if *throughputBaseline != "" {
		out = append(out, struct{ suffix, dir string }{"/baseline", *throughputBaseline})
	}
	return out
}

// BenchmarkPipelineThroughput runs ingest, classify and report as processes over a
// nats-server (the binaries TestMain built) into ClickHouse 18.16, on one audit log of ~200k
// genuine events, from ingest's start until classify has classified every event (events/s)
// and until report has written every finding (stored-events/s), and reports the processor
// time per event of each process (cpu-us/event their sum; the ClickHouse server's apart,
// clickhouse-cpu-us/event) and the page faults (first touches of memory) of them all.
// The cases differ only in how ingest publishes: one message per event (the format before
// batches, --bus-batch-max-events 1: the baseline), and EventBatch messages with each
// compression. With -throughput.baseline DIR each case runs with DIR's binaries too: a
// same-run baseline of another commit, e.g.
//
//	git worktree add /tmp/base main && (cd /tmp/base/services/auditlens && for b in ingest classify report auditlens; do go build -o /tmp/base-bin/ ../$b/cmd/$b; done)
//	flock /work/bench.lock go test -run '^$' -bench PipelineThroughput -benchtime 1x ./e2e/ -args -throughput.baseline /tmp/base-bin
func BenchmarkPipelineThroughput(b *testing.B) {
	ch := chtest.StartServer(b)
	input := filepath.Join(b.TempDir(), "audit.log")
	events := writeInput(b, input, *throughputCopies)
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
		for _, build := range builds() {
			b.Run(tc.name+build.suffix, func(b *testing.B) {
				for range b.N {
					dsn := ch.DSN(fmt.Sprintf("throughput%d_%d", i, time.Now().UnixNano()))
					r := runThroughput(b, ch, build.dir, input, tc.events, dsn, tc.args)
					r.metrics(b, events)
					per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 / float64(events) }
					b.ReportMetric(per(r.ingest), "ingest-cpu-us/event")
					b.ReportMetric(per(r.classify), "classify-cpu-us/event")
					b.ReportMetric(per(r.nats), "nats-cpu-us/event")
					b.ReportMetric(per(r.report), "report-cpu-us/event")
				}
			})
		}
	}
}

// BenchmarkAllInOneThroughput runs the all-in-one binary (ingest, classify and report in one
// process over its embedded NATS server) on the same input as BenchmarkPipelineThroughput,
// into a ClickHouse 18.16 server and, when libchdb is at hand (CHDB_LIB_PATH, else the
// repository's .cache/chdb: chdb.LibraryPath), into embedded chDB. The input is appended to the log the
// binary follows once it is ready (started, schema migrated), and the clock and its CPU
// time run from there until classify has seen every event (events/s) and report has written
// every finding (stored-events/s); with chDB, cpu-us/event holds ClickHouse's work too, with
// the server it is apart (clickhouse-cpu-us/event). -throughput.baseline runs another build
// beside it.
//
//	flock /work/bench.lock go test -run '^$' -bench AllInOneThroughput -benchtime 1x ./e2e/
func BenchmarkAllInOneThroughput(b *testing.B) {
	input := filepath.Join(b.TempDir(), "audit.log")
	events := writeInput(b, input, *throughputCopies)
	for _, engine := range []string{"clickhouse-server", "chdb"} {
		for _, build := range builds() {
			b.Run(engine+build.suffix, func(b *testing.B) {
				var args, env []string
				var ch *chtest.Server
				switch engine {
				case "clickhouse-server":
					ch = chtest.StartServer(b)
					args = []string{"--clickhouse-dsn", ch.DSN(fmt.Sprintf("aio_%d", time.Now().UnixNano()))}
				case "chdb":
					env = []string{"CHDB_LIB_PATH=" + chdbLib(b)}
				}
				for range b.N {
					r := runAllInOneThroughput(b, ch, build.dir, input, events, args, env)
					r.metrics(b, events)
				}
			})
		}
	}
}

// chdbLib returns where libchdb.so is (chdb.LibraryPath), or skips.
func chdbLib(b *testing.B) string {
	lib := chdb.LibraryPath()
	if _, err := os.Stat(lib); err != nil {
		enginetest.Unavailable(b, "chDB (make chdb)", err)
	}
	return lib
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
	ingest, classify, nats, report time.Duration // processor time (the all-in-one's in ingest)
	faults                         int64         // minor page faults of every process
	clickhouse                     time.Duration // processor time of the ClickHouse server, if one
}

// metrics reports what every throughput case shares.
func (r throughput) metrics(b *testing.B, events int) {
	b.ReportMetric(float64(events)/r.elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(events)/r.stored.Seconds(), "stored-events/s")
	total := r.ingest + r.classify + r.nats + r.report
	b.ReportMetric(float64(total.Nanoseconds())/1000/float64(events), "cpu-us/event")
	b.ReportMetric(float64(r.faults)/float64(events)*1000, "page-faults/1k-events")
	if r.clickhouse > 0 {
		b.ReportMetric(float64(r.clickhouse.Nanoseconds())/1000/float64(events), "clickhouse-cpu-us/event")
	}
}

// usage is the CPU time and page faults of processes since a start.
type usage struct {
	b       *testing.B
	cpu0    map[*proc]time.Duration
	faults0 map[*proc]int64
}

func (u *usage) start(ps ...*proc) {
	u.cpu0, u.faults0 = map[*proc]time.Duration{}, map[*proc]int64{}
	for _, p := range ps {
		u.cpu0[p], u.faults0[p] = u.read(p)
	}
}

func (u *usage) read(p *proc) (time.Duration, int64) {
	d, err := procstat.CPU(p.cmd.Process.Pid)
	if err != nil {
		u.b.Fatal(err)
	}
	n, err := procstat.PageFaults(p.cmd.Process.Pid)
	if err != nil {
		u.b.Fatal(err)
	}
	return d, n
}

// since returns p's CPU time since start (all of it for a process started after it), and
// adds its page faults to faults.
func (u *usage) since(p *proc, faults *int64) time.Duration {
	d, n := u.read(p)
	*faults += n - u.faults0[p]
	return d - u.cpu0[p]
}

// pollEvery is how often a throughput benchmark reads a counter it waits on, which has
// reached done of its target: every 100 ms until 90%, then every 10 ms. Serving /metrics
// costs the process watched ~0.7 ms of CPU (polled every 10 ms from the start, ~10% of
// classify's CPU in this benchmark); the clock still stops within 10 ms.
func pollEvery(done float64) time.Duration {
	if done < 0.9 {
		return 100 * time.Millisecond
	}
	return 10 * time.Millisecond
}

// waitStored waits until classify (at classifyAddr) has counted events and report (at
// reportAddr) has written every finding classify published, and returns both times since
// begin.
func waitStored(b *testing.B, classifyAddr, reportAddr string, events int, begin time.Time) (elapsed, stored time.Duration) {
	deadline := time.Now().Add(5 * time.Minute)
	var cl map[string]float64
	for {
		cl = procstat.Scrape(classifyAddr)
		if cl["auditlens_classify_events_total"] >= float64(events) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("classify did not see %d events within 5 minutes (%v)", events, cl["auditlens_classify_events_total"])
		}
		time.Sleep(pollEvery(cl["auditlens_classify_events_total"] / float64(events)))
	}
	elapsed = time.Since(begin)
	if got := cl["auditlens_classify_events_total"]; got != float64(events) {
		b.Errorf("classify classified %v events, want %d", got, events)
	}
	for {
		rp := procstat.Scrape(reportAddr)
		if rp["auditlens_report_findings_written_total"] >= cl["auditlens_classify_findings_total"] && rp["auditlens_report_pending_findings"] == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("report did not write %v findings within 5 minutes (%v)", cl["auditlens_classify_findings_total"], rp["auditlens_report_findings_written_total"])
		}
		time.Sleep(pollEvery(rp["auditlens_report_findings_written_total"] / cl["auditlens_classify_findings_total"]))
	}
	stored = time.Since(begin)
	fmt.Fprintf(b.Output(), "%d events classified in %s, their %v findings written in %s\n", events, elapsed.Round(time.Millisecond),
		cl["auditlens_classify_findings_total"], stored.Round(time.Millisecond))
	return elapsed, stored
}

func runThroughput(b *testing.B, ch *chtest.Server, binDir, input string, events int, dsn string, ingestArgs []string) throughput {
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
	classify := startFrom(b, binDir, dir, "classify", append([]string{"--metrics-addr", classifyMetrics}, common...)...)
	report := startFrom(b, binDir, dir, "report", append([]string{"--metrics-addr", reportMetrics, "--clickhouse-dsn", dsn, "--retention-days", "0"}, common...)...)
	testkit.Eventually(b, 60*time.Second, "classify and report ready", func() bool {
		return ready(classifyMetrics) && ready(reportMetrics)
	})
	u := usage{b: b}
	u.start(classify, nats, report)
	ch0 := ch.CPU()
	begin := time.Now()
	ingest := startFrom(b, binDir, dir, "ingest", append(append([]string{"--audit-log", input, "--checkpoint-dir", filepath.Join(dir, "cp"), "--metrics-addr", ""}, common...), ingestArgs...)...)
	var r throughput
	r.elapsed, r.stored = waitStored(b, classifyMetrics, reportMetrics, events, begin)
	r.ingest, r.classify = u.since(ingest, &r.faults), u.since(classify, &r.faults)
	r.nats, r.report = u.since(nats, &r.faults), u.since(report, &r.faults)
	r.clickhouse = ch.CPU() - ch0
	return r
}

// runAllInOneThroughput starts the all-in-one of binDir with args and env on an empty log
// (writing to ch, nil for chDB), appends input to it once the binary is ready and measures
// until every finding is stored.
func runAllInOneThroughput(b *testing.B, ch *chtest.Server, binDir, input string, events int, args, env []string) throughput {
	dir := b.TempDir()
	log := filepath.Join(dir, "audit.log")
	if err := os.WriteFile(log, nil, 0o644); err != nil {
		b.Fatal(err)
	}
	addr := freeAddr(b)
	p := &proc{t: b, bin: binDir, name: "auditlens", args: append([]string{"--cluster", "bench", "--log-format", "json", "--metrics-addr", addr,
		"--data-root", filepath.Join(dir, "data"), "--audit-log", log, "--retention-days", "0"}, args...), env: env}
	var err error
	if p.log, err = os.Create(filepath.Join(dir, "auditlens.log")); err != nil {
		b.Fatal(err)
	}
	p.start()
	b.Cleanup(func() {
		p.kill()
		p.log.Close()
	})
	testkit.Eventually(b, 2*time.Minute, "auditlens ready", func() bool { return ready(addr) })
	u := usage{b: b}
	u.start(p)
	var ch0 time.Duration
	if ch != nil {
		ch0 = ch.CPU()
	}
	begin := time.Now()
	appendFile(b, log, input)
	var r throughput
	r.elapsed, r.stored = waitStored(b, addr, addr, events, begin)
	r.ingest = u.since(p, &r.faults)
	if ch != nil {
		r.clickhouse = ch.CPU() - ch0
	}
	return r
}

// appendFile appends the contents of src to dst.
func appendFile(b *testing.B, dst, src string) {
	in, err := os.Open(src)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		b.Fatal(err)
	}
	if err := out.Close(); err != nil {
		b.Fatal(err)
	}
}
