package telemetry

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestServerEndpoints(t *testing.T) {
	reg := NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_test_total", Help: "t"})
	reg.MustRegister(c)
	c.Add(3)
	var notReady = errors.New("bus down")
	extra := http.NewServeMux()
	extra.HandleFunc("/report", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "weekly") })
	s, err := NewServer("127.0.0.1:0", reg, map[string]Check{"bus": func() error { return notReady }}, extra)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	get := func(p string) (int, string) {
		resp, err := http.Get("http://" + s.Addr() + p)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "auditlens_test_total 3") || !strings.Contains(body, "auditlens_build_info{commit=") {
		t.Fatalf("metrics %d %s", code, body)
	}
	if code, body := get("/report"); code != 200 || body != "weekly" {
		t.Fatalf("extra handler %d %s", code, body)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("healthz %d", code)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "bus down") {
		t.Fatalf("readyz %d %s", code, body)
	}
	notReady = nil
	if code, _ := get("/readyz"); code != 200 {
		t.Fatalf("readyz after recovery %d", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestLoggerFormats(t *testing.T) {
	var b bytes.Buffer
	l, err := NewLogger("json", "info", &b)
	if err != nil {
		t.Fatal(err)
	}
	l.Debug("hidden")
	l.Info("shown", "k", "v")
	if strings.Contains(b.String(), "hidden") || !strings.Contains(b.String(), `"k":"v"`) {
		t.Fatalf("log: %s", b.String())
	}
	if _, err := NewLogger("xml", "info", &b); err == nil {
		t.Fatal("xml format accepted")
	}
	cfg := Config{LogFormat: "json", LogLevel: "loud"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--log-level") {
		t.Fatalf("validate: %v", err)
	}
}
