// Package procstat reads what the benchmarks watch in a running binary: the metric families
// of its /metrics page, and its resident memory and CPU time in /proc.
package procstat

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Scrape sums every series of each metric family at addr's /metrics (labels ignored); an
// unreachable page gives an empty map (the process may still be starting).
func Scrape(addr string) map[string]float64 {
	out := map[string]float64{}
	// Uncompressed: a benchmark polls often, and gzip would charge the process it watches.
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return out
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
			_, rest, _ = strings.Cut(line, "} ")
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); err == nil {
			out[name] += v
		}
	}
	return out
}

// Memory returns the peak (VmHWM) and current (VmRSS) resident memory of pid in bytes.
func Memory(pid int) (peak, rss int64, err error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("read memory of process %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(line, ":")
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmHWM":
			peak = kb << 10
		case "VmRSS":
			rss = kb << 10
		}
	}
	return peak, rss, nil
}

// clockTicks is USER_HZ, the unit of the times in /proc/<pid>/stat: 100 on every Linux
// platform Go supports.
const clockTicks = 100

// CPU returns the user plus system CPU time process pid has used so far.
func CPU(pid int) (time.Duration, error) {
	f, err := stat(pid)
	if err != nil {
		return 0, fmt.Errorf("read cpu time of process %d: %w", pid, err)
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("read cpu time of process %d: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// PageFaults returns the minor page faults of process pid so far: each a first touch of a
// page of memory (on a virtual machine that backs memory lazily, tens of microseconds each).
func PageFaults(pid int) (int64, error) {
	f, err := stat(pid)
	if err != nil {
		return 0, fmt.Errorf("read page faults of process %d: %w", pid, err)
	}
	n, err := strconv.ParseInt(f[7], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read page faults of process %d: %w", pid, err)
	}
	return n, nil
}

// stat returns the fields of /proc/<pid>/stat after the command name (in parentheses, which
// may hold spaces), at least 13: minflt is the 8th, utime and stime the 12th and 13th.
func stat(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("unexpected stat %q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return nil, fmt.Errorf("unexpected stat %q", b)
	}
	return f, nil
}

// PIDs lists the running processes whose command line contains s (for engines a test
// starts through a package that does not expose their process ids: a data directory
// in their arguments names them).
func PIDs(s string) []int {
	entries, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []int
	for _, e := range entries {
		b, err := os.ReadFile(e)
		if err != nil || !bytes.Contains(b, []byte(s)) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(e))); err == nil && pid != os.Getpid() {
			out = append(out, pid)
		}
	}
	return out
}

// Exited reports whether process pid is gone or has exited and waits to be reaped (a zombie).
func Exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}
