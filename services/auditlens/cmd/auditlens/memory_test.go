package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/enginetest"
	"github.com/auditlens/auditlens/services/auditlens/internal/procstat"
)

// BenchmarkMemory runs the built all-in-one binary (embedded NATS, embedded ClickHouse) over
// generated audit logs of two sizes and reports, per size, the process's peak resident memory
// (VmHWM), its resident memory and Go heap once everything is stored, and the input size: the
// numbers the README's memory statement rests on; at the larger size also the peak as a
// multiple of the smaller size's (peak-rss-x-50MB, ~1.0 when memory does not grow with the
// input), and the events per second from start to the last event classified. It reports; it
// asserts nothing about them. -memory-mb picks the sizes (50,200 by default; the README's
// rows also run 800).
//
//	flock /work/bench.lock go test -run '^$' -bench Memory -benchtime 1x ./cmd/auditlens/ -args -memory-mb 50,200,800
func BenchmarkMemory(b *testing.B) {
	lib := chdbLib(b)
	bin := filepath.Join(b.TempDir(), "auditlens")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		b.Fatalf("build auditlens: %v", err)
	}
	var firstPeak int64 // at the smallest input
	for _, mb := range memorySizes(b) {
		b.Run(fmt.Sprintf("input=%dMB", mb), func(b *testing.B) {
			dir := b.TempDir()
			input := filepath.Join(dir, "audit.log")
			lines := writeAuditLog(b, input, mb<<20)
			st, _ := os.Stat(input)
			b.SetBytes(st.Size())
			for range b.N {
				m := runAllInOne(b, bin, lib, input, lines, filepath.Join(dir, fmt.Sprint("data-", time.Now().UnixNano())))
				b.ReportMetric(float64(m.peakRSS)/(1<<20), "peak-rss-MB")
				if firstPeak == 0 {
					firstPeak = m.peakRSS
				} else {
					// ~1.0 when memory does not grow with the input.
					b.ReportMetric(float64(m.peakRSS)/float64(firstPeak), "peak-rss-x-50MB")
				}
				b.ReportMetric(float64(m.endRSS)/(1<<20), "end-rss-MB")
				b.ReportMetric(float64(m.heap)/(1<<20), "end-heap-MB")
				b.ReportMetric(float64(st.Size())/(1<<20), "input-MB")
				b.ReportMetric(float64(lines)/m.took.Seconds(), "events/s")
			}
		})
	}
}

var memoryMB = flag.String("memory-mb", "50,200", "audit log sizes of BenchmarkMemory in MB, comma-separated")

// memorySizes parses -memory-mb.
func memorySizes(b *testing.B) []int {
	var sizes []int
	for _, f := range strings.Split(*memoryMB, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("-memory-mb %q: want sizes in MB, comma-separated", *memoryMB)
		}
		sizes = append(sizes, n)
	}
	return sizes
}

type memory struct {
	peakRSS, endRSS, heap int64
	// took is the time from start until the last event was classified.
	took time.Duration
}

// chdbLib finds libchdb.so (CHDB_LIB_PATH, else the repository's .cache/chdb).
func chdbLib(b *testing.B) string {
	lib := os.Getenv("CHDB_LIB_PATH")
	if lib == "" {
		lib, _ = filepath.Abs("../../../../.cache/chdb/libchdb.so")
	}
	if _, err := os.Stat(lib); err != nil {
		enginetest.Unavailable(b, "chDB (make chdb)", err)
	}
	return lib
}

// writeAuditLog multiplies the genuine events of examples/audit.log up to size bytes: copy i
// of every event gets auditID "<id>-<i>", so every line is a distinct request with a real
// shape. It returns the number of lines.
func writeAuditLog(b *testing.B, path string, size int) int {
	src, err := os.ReadFile("../../../../examples/audit.log")
	if err != nil {
		b.Fatal(err)
	}
	var events []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(src), []byte("\n")) {
		var ev map[string]any
		if err := json.Unmarshal(line, &ev); err != nil {
			b.Fatal(err)
		}
		events = append(events, ev)
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	n, written := 0, 0
	for i := 0; written < size; i++ {
		for _, ev := range events {
			id := ev["auditID"]
			ev["auditID"] = fmt.Sprintf("%v-%d", id, i)
			line, _ := json.Marshal(ev)
			ev["auditID"] = id
			_, _ = w.Write(line) // a failed write shows in w.Flush
			_ = w.WriteByte('\n')
			written += len(line) + 1
			n++
		}
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	return n
}

// runAllInOne runs bin over input until ingest has read every line, classify has stopped
// counting events (a few lines of the sample are duplicates or not classifiable) and report
// has written every finding classify published.
func runAllInOne(b *testing.B, bin, lib, input string, lines int, dataDir string) memory {
	addr := freeAddr(b)
	cmd := exec.Command(bin, "--data-root", dataDir, "--audit-log", input, "--retention-days", "0",
		"--metrics-addr", addr, "--log-level", "warn")
	cmd.Env = append(os.Environ(), "CHDB_LIB_PATH="+lib)
	logf, err := os.Create(filepath.Join(filepath.Dir(dataDir), "auditlens.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}()
	deadline := time.Now().Add(20 * time.Minute)
	var (
		m      memory
		last   = -1.0
		stable int
	)
	for {
		if time.Now().After(deadline) {
			b.Fatalf("not done after 20m; log in %s", logf.Name())
		}
		if cmd.ProcessState != nil {
			b.Fatalf("auditlens exited; log in %s", logf.Name())
		}
		time.Sleep(500 * time.Millisecond)
		met := procstat.Scrape(addr)
		classified := met["auditlens_classify_events_total"]
		published := met["auditlens_classify_findings_total"]
		written := met["auditlens_report_findings_written_total"]
		if classified == last {
			stable++
		} else {
			last, stable = classified, 0
			m.took = time.Since(start) // the last event classified, within a poll
		}
		if met["auditlens_ingest_lines_read_total"] >= float64(lines) && stable >= 4 && published > 0 &&
			written >= published && met["auditlens_report_pending_findings"] == 0 {
			m.heap = int64(met["go_memstats_heap_inuse_bytes"])
			break
		}
	}
	if m.peakRSS, m.endRSS, err = procstat.Memory(cmd.Process.Pid); err != nil {
		b.Skip(err)
	}
	return m
}

func freeAddr(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
