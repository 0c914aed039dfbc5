package scan

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// BenchmarkScan measures `classify scan --target-version 1.25` over the genuine events of
// examples/audit.log, twenty times over (~2.8 MB): loading the catalogue, reading, decoding,
// classifying, de-duplicating and writing JSON lines (discarded).
func BenchmarkScan(b *testing.B) {
	one, err := os.ReadFile("../../../examples/audit.log")
	if err != nil {
		b.Fatal(err)
	}
	in := bytes.Repeat(one, 20)
	f := filepath.Join(b.TempDir(), "audit.log")
	if err := os.WriteFile(f, in, 0o644); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if code := Main([]string{"--target-version", "1.25", "--progress", "never", f}, nil, io.Discard, io.Discard); code == ExitError {
			b.Fatalf("exit %d", code)
		}
	}
}

// BenchmarkScanParallel compares, in one run, `classify scan --target-version 1.25` reading
// as it goes (--parallel 1) and in parallel (one worker per core) over 300,000 genuine events
// of 1-1.5 KB (the real-world corpus's events of that size, as in ingest's testdata, each
// copy with its own audit id: about 360 MB), JSON lines discarded. maxrss-MB is the
// process's peak after the sub-benchmark: the parallel scan reads the same file in chunks,
// so it should not be far above the sequential one. cores is the CPU time used over the time
// taken: on a machine shared with other work the parallel scan gets fewer than GOMAXPROCS.
func BenchmarkScanParallel(b *testing.B) {
	var ev [][]byte
	for _, e := range realEvents(b) {
		if len(e) >= 1000 && len(e) <= 1500 {
			ev = append(ev, e)
		}
	}
	const events = 300_000
	path := filepath.Join(b.TempDir(), "audit.log")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var size int64
	for i := range events {
		line := derive(ev[i%len(ev)], i, "")
		_, _ = w.Write(line) // a failed write shows in Flush
		_ = w.WriteByte('\n')
		size += int64(len(line)) + 1
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	// The events built above are garbage now (ev is not used below): collected and returned
	// to the system here, so that the runtime does not do it while the scans are measured.
	debug.FreeOSMemory()
	for _, n := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("parallel=%d", n), func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				if code := Main([]string{"--target-version", "1.25", "--progress", "never", "--parallel", strconv.Itoa(n), path}, nil, io.Discard, io.Discard); code == ExitError {
					b.Fatalf("exit %d", code)
				}
			}
			cpu := cpuTime() - cpu0
			b.ReportMetric(float64(events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(events*b.N), "cpu-ns/event")
			b.ReportMetric(cpu.Seconds()/b.Elapsed().Seconds(), "cores")
			var ru syscall.Rusage
			if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
				b.ReportMetric(float64(ru.Maxrss)/1024, "maxrss-MB")
			}
		})
	}
}

// cpuTime is the CPU time the process has used (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
