package access

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/auditlens/auditlens/lib/enginetest"
)

// records keeps the log records handled.
type records struct {
	mu  sync.Mutex
	all []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, rec)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// TestApiserverDownLogsOnce: while the apiserver does not answer, every request with a token
// gets 503, and the log holds one error of the console and one of the Kubernetes libraries,
// not one per request (review 3 E8: one ERROR line per request).
func TestApiserverDownLogsOnce(t *testing.T) {
	port, err := enginetest.FreePort() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	rec := &records{}
	k, err := NewKube(&rest.Config{Host: "https://127.0.0.1:" + strconv.Itoa(port)}, DefaultKubeConfig(), slog.New(rec))
	if err != nil {
		t.Fatal(err)
	}
	h := k.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("served without a review") }))
	for i := range 20 {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Authorization", "Bearer token-"+strconv.Itoa(i))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("request %d: %d, want 503", i, w.Code)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	byMessage := map[string]int{}
	for _, r := range rec.all {
		if r.Level >= slog.LevelError {
			byMessage[r.Message]++
		}
	}
	t.Logf("error records: %v", byMessage)
	if len(byMessage) == 0 {
		t.Fatal("no error logged while the apiserver is down")
	}
	for m, n := range byMessage {
		if n > 1 {
			t.Errorf("%q logged %d times for 20 requests within 10 s, want once", m, n)
		}
	}
}
