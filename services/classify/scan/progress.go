package scan

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// startProgress draws a progress line on stderr every 250 ms once a scan has run for a
// second (so small inputs never show one): a bar when the input size is known (total > 0),
// a counter otherwise. The returned func stops it and clears the line.
func (s *scanner) startProgress(total int64) func() {
	on := s.cfg.Progress == "always" || (s.cfg.Progress == "auto" && isTerminal(s.stderr))
	if !on {
		return func() {}
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(stopped)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		drawn := false
		for {
			select {
			case <-done:
				if drawn {
					fmt.Fprint(s.stderr, "\r\033[K")
				}
				return
			case <-t.C:
				el := time.Since(start)
				if el < time.Second {
					continue
				}
				fmt.Fprint(s.stderr, "\r"+progressLine(s.bytesRead.Load(), total, s.events.Load(), el))
				drawn = true
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

func progressLine(read, total, events int64, el time.Duration) string {
	rate := float64(events) / el.Seconds()
	tail := fmt.Sprintf(" %s read, %d events, %.0f events/s", mib(read), events, rate)
	if total <= 0 {
		return "classify scan:" + tail + "\033[K"
	}
	frac := min(float64(read)/float64(total), 1)
	const width = 30
	n := int(frac * width)
	bar := strings.Repeat("=", n) + strings.Repeat(" ", width-n)
	if n < width {
		bar = bar[:n] + ">" + bar[n+1:]
	}
	return fmt.Sprintf("[%s] %3.0f%% of %s,%s\033[K", bar, frac*100, mib(total), tail)
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
