package natsbus

import (
	"strings"
	"testing"
)

func TestStartServerListen(t *testing.T) {
	for _, listen := range []string{"127.0.0.1:0", "[::1]:0"} {
		srv, err := StartServer(t.TempDir(), listen)
		if err != nil {
			if strings.Contains(listen, "::1") && strings.Contains(err.Error(), "address") {
				continue // no IPv6 loopback on this machine
			}
			t.Fatalf("listen %q: %v", listen, err)
		}
		if srv.Addr() == nil {
			t.Errorf("listen %q: no address", listen)
		}
		srv.Shutdown()
		srv.WaitForShutdown()
	}
	for _, bad := range []string{"4222", "host:port", "127.0.0.1:70000", ":-1"} {
		if _, err := StartServer(t.TempDir(), bad); err == nil || !strings.Contains(err.Error(), "--nats-embedded-listen") {
			t.Errorf("listen %q: err %v, want a --nats-embedded-listen error", bad, err)
		}
	}
}
