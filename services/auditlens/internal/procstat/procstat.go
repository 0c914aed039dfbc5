// Package procstat reads what the memory benchmarks watch in a running binary: the metric
// families of its /metrics page, its resident memory and its processor time in /proc.
package procstat

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// Scrape sums every series of each metric family at addr's /metrics (labels ignored); an
// unreachable page gives an empty map (the process may still be starting).
func Scrape(addr string) map[string]float64 {
	out := map[string]float64{}
	resp, err := http.Get("http://" + addr + "/metrics")
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

// CPU returns the processor time (user and system) pid has used so far.
func CPU(pid int) (time.Duration, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read cpu time of process %d: %w", pid, err)
	}
	// The command name (field 2) may hold spaces; the fields after its ")" are fixed:
	// utime and stime are fields 14 and 15, the 12th and 13th after the state.
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("read cpu time of process %d: short /proc stat", pid)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("read cpu time of process %d: %w", pid, err)
		}
		ticks += n
	}
	// USER_HZ is 100 on Linux for every architecture Go supports.
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}
