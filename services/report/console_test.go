package report

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/report/kubeclient"
)

// nonLoopbackIP is an address of this machine that is not loopback, or "" when it has none.
func nonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}

// consoleContent is what the tests' console handler answers.
const consoleContent = "console content"

// startConsole serves a handler answering consoleContent on cfg's listeners until the test
// ends, and returns a GET from the address from (a local address, or "" for loopback) to the
// first listener's port.
func startConsole(t *testing.T, cfg ConsoleConfig) func(from, path string) (int, string) {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, consoleContent) })
	srv, err := newConsoleServer(cfg, kubeclient.Config{}, h, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	_, port, _ := net.SplitHostPort(srv.Addrs()[0])
	get := func(from, path string) (int, string) {
		// Dial from the non-loopback address when asked, so the server sees it as the peer.
		host, d := "127.0.0.1", &net.Dialer{Timeout: 5 * time.Second}
		if from != "" {
			host, d.LocalAddr = from, &net.TCPAddr{IP: net.ParseIP(from)}
		}
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
		resp, err := c.Get("http://" + net.JoinHostPort(host, port) + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	testkit.Eventually(t, 5*time.Second, "the listener answers", func() bool { code, _ := get("", "/"); return code == 200 })
	return get
}

var consolePaths = []string{"/", "/report", "/callers?rule=psp", "/requests", "/request?audit-id=x", "/search?q=a", "/metrics", "/nope"}

// TestConsoleRefusesOtherMachines: the console's plain listener, even bound to every
// interface, gives no console content to a request from a non-loopback address, and serves
// one from loopback.
func TestConsoleRefusesOtherMachines(t *testing.T) {
	ip := nonLoopbackIP(t)
	if ip == "" {
		t.Skip("this machine has no non-loopback IPv4 address to send from")
	}
	cfg := DefaultConsoleConfig()
	cfg.Addr = "0.0.0.0:0"
	get := startConsole(t, cfg)
	for _, path := range consolePaths {
		code, body := get(ip, path)
		if code != http.StatusForbidden || strings.Contains(body, consoleContent) {
			t.Errorf("GET %s from %s: %d %q, want 403 without console content", path, ip, code, body)
		}
		if code, body := get("", path); code != http.StatusOK || body != consoleContent {
			t.Errorf("GET %s from loopback: %d %q, want the console", path, code, body)
		}
	}
}

// TestConsoleAllowRemote: --report-console-allow-remote (a container published on the host's
// loopback, where every client looks remote) serves a non-loopback client; it needs the
// listener it opens.
func TestConsoleAllowRemote(t *testing.T) {
	ip := nonLoopbackIP(t)
	if ip == "" {
		t.Skip("this machine has no non-loopback IPv4 address to send from")
	}
	cfg := DefaultConsoleConfig()
	cfg.Addr, cfg.AllowRemote = "0.0.0.0:0", true
	get := startConsole(t, cfg)
	for _, path := range consolePaths {
		if code, body := get(ip, path); code != http.StatusOK || body != consoleContent {
			t.Errorf("GET %s from %s with --report-console-allow-remote: %d %q, want the console", path, ip, code, body)
		}
	}
	cfg.Addr = ""
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--report-console-allow-remote") {
		t.Errorf("--report-console-allow-remote without --report-console-addr: %v, want an error naming it", err)
	}
}
