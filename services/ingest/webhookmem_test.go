package ingest_test

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/ingest/internal/testlog"
	"github.com/auditlens/auditlens/services/ingest/internal/testnats"
	"github.com/auditlens/auditlens/services/ingest/internal/testpki"
)

// BenchmarkWebhookMemory measures the peak resident memory (VmHWM) of an ingest process
// serving the webhook while N clients each post a ~30 MB EventList at once (retrying after a
// 429 as the apiserver does), with the in-flight body limit off (the behaviour before it
// existed) and at its default, without and with GOMEMLIMIT (the Deployment sets it to its
// memory limit, 512Mi). The NATS server runs in the benchmark's process, not in ingest's.
// It reports memory, not speed:
//
//	go test -run '^$' -bench WebhookMemory -benchtime 1x .
func BenchmarkWebhookMemory(b *testing.B) {
	ev := testlog.Load(b)
	const clients = 6
	var bodies [][]byte
	for c := range clients {
		var buf bytes.Buffer
		buf.WriteString(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[`)
		for i := 0; buf.Len() < 30<<20; i++ {
			line, _ := ev.Event(c*1000000 + i)
			if i > 0 {
				buf.WriteByte(',')
			}
			buf.Write(line)
		}
		buf.WriteString("]}")
		bodies = append(bodies, buf.Bytes())
	}
	n := testnats.StartStock(b)
	for _, limit := range []struct {
		name, flag, memLimit string
	}{
		{"inflight=unbounded", strconv.Itoa(8 << 30), ""},
		{"inflight=default", "", ""},
		{"inflight=unbounded/GOMEMLIMIT=512MiB", strconv.Itoa(8 << 30), "512MiB"},
		{"inflight=default/GOMEMLIMIT=512MiB", "", "512MiB"},
	} {
		b.Run(limit.name, func(b *testing.B) {
			for range b.N {
				hwm, ok429 := webhookPeak(b, n, limit.flag, limit.memLimit, bodies)
				b.ReportMetric(float64(hwm)/(1<<20), "peak-RSS-MiB")
				b.ReportMetric(float64(ok429), "429s")
			}
		})
	}
}

// webhookPeak runs ingest with the webhook, posts bodies concurrently until each got a 200,
// and returns the process's peak RSS in bytes and how many 429s were answered.
func webhookPeak(b *testing.B, n *testnats.Server, inflight, memLimit string, bodies [][]byte) (int64, int) {
	dir := b.TempDir()
	pki := testpki.Write(b, dir)
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("tok\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	addr := testnats.FreeAddr(b)
	args := []string{"--webhook-addr", addr, "--webhook-tls-cert", pki.ServerCert, "--webhook-tls-key", pki.ServerKey,
		"--webhook-token-file", tok, "--nats-url", n.URL(), "--cluster", "test", "--metrics-addr", "", "--max-event-size", "1000000",
		"--webhook-publish-timeout", "60s"}
	if inflight != "" {
		args = append(args, "--webhook-max-inflight-bytes", inflight)
	}
	cmd := exec.Command(ingestBin, args...)
	cmd.Env = append(os.Environ(), "GOMEMLIMIT="+memLimit)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.Pool}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Minute}
	testkit.Eventually(b, 90*time.Second, "the webhook to listen", func() bool {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pki.Pool})
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	var mu sync.Mutex
	tooMany := 0
	var wg sync.WaitGroup
	for _, body := range bodies {
		wg.Go(func() {
			for {
				req, _ := http.NewRequest(http.MethodPost, "https://"+addr+"/audit", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer tok")
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					return
				case http.StatusTooManyRequests:
					mu.Lock()
					tooMany++
					mu.Unlock()
					time.Sleep(100 * time.Millisecond) // the apiserver waits Retry-After; shorter here
				default:
					b.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		})
	}
	wg.Wait()
	return peakRSS(b, cmd.Process.Pid), tooMany
}

// peakRSS is the peak resident memory (VmHWM) of process pid, in bytes.
func peakRSS(tb testing.TB, pid int) int64 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Skip("no /proc: cannot read the peak RSS")
	}
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	tb.Fatal("no VmHWM in /proc status")
	return 0
}
