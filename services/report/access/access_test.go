package access

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:5000": true, "127.1.2.3:1": true, "[::1]:80": true, "[::ffff:127.0.0.1]:80": true,
		"192.0.2.2:5000": false, "[2001:db8::1]:80": false, "[::ffff:10.0.0.1]:1": false, "localhost:80": false, "": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
	for addr, want := range map[string]bool{"127.0.0.1:9104": true, "localhost:1": true, "[::1]:1": true, ":9104": false, "0.0.0.0:1": false, "10.0.0.1:1": false} {
		if got := IsLoopbackListen(addr); got != want {
			t.Errorf("IsLoopbackListen(%q) = %v, want %v", addr, got, want)
		}
	}
}

// A handler reached without Loopback or Kube in front allows no cluster; Loopback refuses
// another machine before the handler runs.
func TestLoopbackGate(t *testing.T) {
	if ok, _ := Allowed(context.Background(), "prod"); ok {
		t.Fatal("a context without an authorizer allows a cluster")
	}
	ran := false
	h := Loopback(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		ran = true
		if ok, _ := Allowed(r.Context(), "prod"); !ok {
			t.Error("a loopback request is not allowed the cluster")
		}
	}))
	for _, c := range []struct {
		remote, host string
		want         int
	}{
		{"192.0.2.7:4000", "localhost:9101", http.StatusForbidden},
		{"127.0.0.1:4000", "localhost:9101", http.StatusOK},
		{"127.0.0.1:4000", "LOCALHOST.", http.StatusOK},
		{"127.0.0.1:4000", "console.localhost:9101", http.StatusOK},
		{"127.0.0.1:4000", "127.0.0.1:9101", http.StatusOK},
		{"[::1]:4000", "[::1]:9101", http.StatusOK},
		// DNS rebinding: the attacker's name resolves to 127.0.0.1, the browser sends it.
		{"127.0.0.1:4000", "rebind.attacker.example", http.StatusMisdirectedRequest},
		{"127.0.0.1:4000", "localhost.attacker.example:9101", http.StatusMisdirectedRequest},
		{"127.0.0.1:4000", "127.0.0.1.nip.io:9101", http.StatusMisdirectedRequest},
		{"127.0.0.1:4000", "", http.StatusMisdirectedRequest},
	} {
		ran = false
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr, r.Host = c.remote, c.host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.want || ran != (c.want == http.StatusOK) {
			t.Errorf("from %s for Host %q: %d (handler ran: %v), want %d", c.remote, c.host, w.Code, ran, c.want)
		}
	}
}
