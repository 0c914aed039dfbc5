package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/lib/testkit"
)

func TestConsoleURL(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:9100": "http://127.0.0.1:9100/",
		":9100":          "http://127.0.0.1:9100/",
		"0.0.0.0:9100":   "http://127.0.0.1:9100/",
		"[::]:9100":      "http://127.0.0.1:9100/",
		"[::1]:9100":     "http://[::1]:9100/",
		"auditlens:8080": "http://auditlens:8080/",
		"":               "",
		"127.0.0.1:0":    "",
		"no-port-at-all": "",
	} {
		if got := consoleURL(addr); got != want {
			t.Errorf("consoleURL(%q) = %q, want %q", addr, got, want)
		}
	}
}

// lockedBuffer is a log destination read while the stage writes to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestAnnounceOnceReady: the URL is logged once, only after every stage is ready.
func TestAnnounceOnceReady(t *testing.T) {
	var isReady atomic.Bool
	stage := daemon.ComponentFuncs{ReadyFunc: func() error {
		if !isReady.Load() {
			return errors.New("not yet")
		}
		return nil
	}}
	var out lockedBuffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	a := announce("http://127.0.0.1:9100/", []daemon.Component{daemon.ComponentFuncs{}, stage}, nil, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	time.Sleep(300 * time.Millisecond) // three polls while a stage is not ready
	if s := out.String(); s != "" {
		t.Fatalf("logged before every stage was ready: %s", s)
	}
	isReady.Store(true)
	testkit.Eventually(t, 10*time.Second, "the URL logged", func() bool { return out.String() != "" })
	time.Sleep(300 * time.Millisecond) // more polls would log again
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if strings.Count(s, "\n") != 1 || !strings.Contains(s, "level=INFO") || !strings.Contains(s, "url=http://127.0.0.1:9100/") {
		t.Errorf("want one INFO line with the URL, got %q", s)
	}
}
