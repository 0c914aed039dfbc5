package ingest_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/ingest/internal/testlog"
	"github.com/auditlens/auditlens/services/ingest/internal/testnats"
	"github.com/auditlens/auditlens/services/ingest/internal/testpki"
)

// Issue 9, defect 9: one authenticated client sending its body slowly made SIGTERM wait
// 15 s and exit 1 ("webhook shutdown: context deadline exceeded"). Now the body still
// arriving is given up (the client gets 503 or a closed connection and sends it again) and
// ingest exits 0 without waiting for it.
func TestWebhookShutdownWithSlowClient(t *testing.T) {
	ev := testlog.Load(t)
	dir := t.TempDir()
	pki := testpki.Write(t, dir)
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := testnats.FreeAddr(t)
	cmd := exec.Command(ingestBin, "--webhook-addr", addr, "--webhook-tls-cert", pki.ServerCert, "--webhook-tls-key", pki.ServerKey,
		"--webhook-token-file", tok, "--nats-url", "embedded", "--nats-store-dir", filepath.Join(dir, "nats"),
		"--cluster", "test", "--metrics-addr", "", "--log-format", "json")
	cmd.Stderr = t.Output()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	tc := &tls.Config{RootCAs: pki.Pool}
	var conn *tls.Conn
	testkit.Eventually(t, 90*time.Second, "the webhook to listen", func() bool {
		c, err := tls.Dial("tcp", addr, tc)
		if err == nil {
			conn = c
		}
		return err == nil
	})
	defer conn.Close()
	// A good request first, on the same connection: the handler is known to be reached.
	line, _ := ev.Event(0)
	body := `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + string(line) + `]}`
	if _, err := conn.Write([]byte("POST /audit HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: %v %v", resp, err)
	}
	resp.Body.Close()
	// Then a request whose body stops arriving after its first bytes.
	if _, err := conn.Write([]byte("POST /audit HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\nContent-Length: 1000000\r\n\r\n{\"kind\":")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // let the server start reading the body; nothing to poll for
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	took := time.Since(start)
	var exit *exec.ExitError
	if errors.As(err, &exit) || err != nil {
		t.Fatalf("ingest after SIGTERM with a slow client: %v after %s, want exit 0", err, took)
	}
	// The bound is the publish timeout (10 s); before, it waited 15 s.
	if took > 10*time.Second {
		t.Errorf("shutdown took %s with a slow client", took)
	}
	if resp, err := http.ReadResponse(br, nil); err == nil && resp.StatusCode == http.StatusOK {
		t.Errorf("the cut request was answered 200")
	}
	t.Logf("shutdown took %s", took)
}
