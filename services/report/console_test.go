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
	content := "console content"
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, content) })
	srv, err := newConsoleServer(cfg, h, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	_, port, _ := net.SplitHostPort(srv.Addrs()[0])
	get := func(host, path string) (int, string) {
		// Dial from the non-loopback address when asked, so the server sees it as the peer.
		d := &net.Dialer{Timeout: 5 * time.Second}
		if host == ip {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(ip)}
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
	testkit.Eventually(t, 5*time.Second, "the listener answers", func() bool { code, _ := get("127.0.0.1", "/"); return code == 200 })
	for _, path := range []string{"/", "/report", "/callers?rule=psp", "/requests", "/request?audit-id=x", "/search?q=a", "/metrics", "/nope"} {
		code, body := get(ip, path)
		if code != http.StatusForbidden || strings.Contains(body, content) {
			t.Errorf("GET %s from %s: %d %q, want 403 without console content", path, ip, code, body)
		}
		if code, body := get("127.0.0.1", path); code != http.StatusOK || body != content {
			t.Errorf("GET %s from loopback: %d %q, want the console", path, code, body)
		}
	}
}
