package firehose_test

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/envelope/envelopetest"
	"github.com/auditlens/auditlens/services/ingest/internal/testlog"
	"github.com/auditlens/auditlens/services/ingest/internal/testnats"
)

// TestKill9 kills the ingest process -9 while a Firehose client (retrying every request
// until it gets 200, as Firehose does) delivers CloudWatch subscription records, and
// restarts it: every event is stored exactly once. The envelopes are BUILT around genuine
// events (no genuine EKS envelope is public).
func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the ingest binary")
	}
	bin := filepath.Join(t.TempDir(), "ingest")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/ingest").CombinedOutput(); err != nil {
		t.Fatalf("build ingest: %v\n%s", err, out)
	}
	ev := testlog.Load(t)
	n := testnats.Start(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func() *exec.Cmd {
		cmd := exec.Command(bin, "--firehose-addr", addr, "--firehose-access-key-file", key, "--nats-url", n.URL(),
			"--cluster", "fallback", "--metrics-addr", "", "--log-format", "json")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	const requests, per = 300, 20
	var want []string
	var bodies [][]byte
	for r := range requests {
		var evs [][]byte
		for i := range per {
			line, id := ev.Event(r*per + i)
			evs = append(evs, line)
			want = append(want, id)
		}
		bodies = append(bodies, envelopetest.FirehoseBody(fmt.Sprintf("req-%d", r), envelopetest.Gzip(envelopetest.Subscription(evs))))
	}
	var delivered atomic.Int64
	done := make(chan struct{})
	go func() { // the Firehose stream: one request at a time, each retried until 200
		defer close(done)
		client := &http.Client{Timeout: 10 * time.Second}
		for r, body := range bodies {
			for {
				req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/", bytes.NewReader(body))
				req.Header.Set("X-Amz-Firehose-Request-Id", fmt.Sprintf("req-%d", r))
				req.Header.Set("X-Amz-Firehose-Access-Key", "k")
				resp, err := client.Do(req)
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						break
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
			delivered.Add(1)
		}
	}()
	cmd := run()
	for delivered.Load() < requests/5 {
		time.Sleep(5 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	t.Logf("killed after %d of %d requests", delivered.Load(), requests)
	if delivered.Load() == requests {
		t.Fatal("every request was delivered before the kill; send more")
	}
	cmd = run()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		t.Fatal("the client did not deliver every request after the restart")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("ingest after SIGTERM: %v", err)
	}
	got := map[string]int{}
	msgs := n.Messages(t, bus.Events)
	for _, m := range msgs {
		got[strings.TrimPrefix(m.Header.Get(jetstream.MsgIDHeader), envelopetest.Cluster+"/")]++
	}
	if len(msgs) != len(want) {
		t.Errorf("%d messages, want %d", len(msgs), len(want))
	}
	for _, id := range want {
		if got[id] != 1 {
			t.Fatalf("event %s stored %d times", id, got[id])
		}
	}
}
