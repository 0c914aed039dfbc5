package ingest_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/envelope/envelopetest"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/ingest/internal/testlog"
	"github.com/auditlens/auditlens/services/ingest/internal/testnats"
)

// TestFirehoseMemory: an ingest process with the Firehose endpoint at its defaults (64 MiB
// bodies, 128 MiB decoded per request, 256 MiB in flight) and GOMEMLIMIT=512MiB, as the chart
// runs it under a 512Mi limit, receives four requests at once, each of 100 records of genuine
// audit events that decode to about 100 MiB (Firehose retries the 503s of the budget). Its peak
// resident memory stays under that limit. Before, the endpoint held each body, its records
// decoded from base64 and every event twice (unpacked and packed): the review measured
// 1.05-1.12 GB (review 3 E9).
func TestFirehoseMemory(t *testing.T) {
	ev := testlog.Load(t)
	const requests, records, recordSize = 4, 100, 1 << 20
	var bodies [][]byte
	n := 0
	for r := range requests {
		var recs [][]byte
		decoded := 0
		for range records {
			var events [][]byte
			size := 0
			for size < recordSize {
				line, _ := ev.Event(n)
				n++
				events = append(events, line)
				size += len(line)
			}
			decoded += size
			recs = append(recs, envelopetest.Gzip(envelopetest.SubscriptionOf("prod", events)))
		}
		bodies = append(bodies, envelopetest.FirehoseBody(fmt.Sprintf("mem-%d", r), recs...))
		t.Logf("request %d: %d bytes, records decode to %d MiB", r, len(bodies[r]), decoded>>20)
	}
	nats := testnats.StartStock(t)
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, []byte("k3y\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := testnats.FreeAddr(t)
	cmd := exec.Command(ingestBin, "--firehose-addr", addr, "--firehose-access-key-file", key, "--nats-url", nats.URL(),
		"--cluster", "test", "--metrics-addr", "", "--max-event-size", "1000000")
	cmd.Env = append(os.Environ(), "GOMEMLIMIT=512MiB")
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("ingest's log:\n%s", logs.String())
		}
	}()
	client := &http.Client{Timeout: 5 * time.Minute}
	testkit.Eventually(t, 90*time.Second, "the endpoint to listen", func() bool {
		resp, err := client.Get("http://" + addr + "/")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	var mu sync.Mutex
	busy := 0
	var wg sync.WaitGroup
	for r, body := range bodies {
		wg.Go(func() {
			for {
				req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/", bytes.NewReader(body))
				req.Header.Set("X-Amz-Firehose-Access-Key", "k3y")
				req.Header.Set("X-Amz-Firehose-Request-Id", fmt.Sprintf("mem-%d", r))
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					return
				case http.StatusServiceUnavailable:
					mu.Lock()
					busy++
					mu.Unlock()
					time.Sleep(100 * time.Millisecond) // Firehose backs off longer
				default:
					t.Errorf("request %d: status %d", r, resp.StatusCode)
					return
				}
			}
		})
	}
	wg.Wait()
	hwm := peakRSS(t, cmd.Process.Pid)
	t.Logf("peak RSS %d MiB (%d answers 503 while the budget was held)", hwm>>20, busy)
	if got := nats.Count(t, bus.Events); got != uint64(n) {
		t.Errorf("%d events stored, want %d", got, n)
	}
	if hwm > 512<<20 {
		t.Errorf("peak RSS %d MiB: want under the chart's 512Mi limit", hwm>>20)
	}
}
