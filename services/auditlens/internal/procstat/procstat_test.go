package procstat

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestScrapeSumsSeriesOfAFamily(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "# HELP x_total help\n# TYPE x_total counter\nx_total{input=\"file\"} 3\nx_total{input=\"webhook\"} 4\ny 1.5\n")
	}))
	defer srv.Close()
	got := Scrape(strings.TrimPrefix(srv.URL, "http://"))
	if got["x_total"] != 7 || got["y"] != 1.5 || len(got) != 2 {
		t.Fatalf("Scrape = %v, want x_total 7 and y 1.5", got)
	}
	if got := Scrape("127.0.0.1:1"); len(got) != 0 {
		t.Fatalf("unreachable page: %v", got)
	}
}

func TestMemoryOfThisProcess(t *testing.T) {
	peak, rss, err := Memory(os.Getpid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	if rss <= 0 || peak < rss {
		t.Fatalf("peak %d, rss %d: want 0 < rss <= peak", peak, rss)
	}
}

func TestCPUAndPIDsOfAChild(t *testing.T) {
	marker := "procstat-test-" + t.Name()
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; sleep 30", marker)
	if err := cmd.Start(); err != nil {
		t.Skipf("no sh here: %v", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if pids := PIDs(marker); len(pids) != 1 || pids[0] != cmd.Process.Pid {
		t.Fatalf("PIDs(%q) = %v, want [%d]", marker, pids, cmd.Process.Pid)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		d, err := CPU(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if d > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a busy child used no cpu time in 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := CPU(1 << 30); err == nil {
		t.Fatal("cpu time of a process that does not exist")
	}
	if Exited(cmd.Process.Pid) || !Exited(1<<30) {
		t.Fatal("Exited: a running child exited, or a missing process runs")
	}
	_ = cmd.Process.Kill()
	deadline = time.Now().Add(10 * time.Second)
	for !Exited(cmd.Process.Pid) { // a zombie until Wait reaps it
		if time.Now().After(deadline) {
			t.Fatal("a killed child has not exited after 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPageFaultsGrowWhenMemoryIsTouched(t *testing.T) {
	before, err := PageFaults(os.Getpid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	mem := make([]byte, 16<<20) // fresh pages: each first write faults
	for i := 0; i < len(mem); i += 4096 {
		mem[i] = 1
	}
	after, err := PageFaults(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 1000 {
		t.Fatalf("page faults %d -> %d after touching 4096 fresh pages, want at least 1000 more", before, after)
	}
	if _, err := PageFaults(1 << 30); err == nil {
		t.Fatal("PageFaults of a process that does not exist: no error")
	}
}
