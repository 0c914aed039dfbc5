package procstat

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

func TestScrapeSumsSeriesOfAFamily(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "# HELP x_total help\n# TYPE x_total counter\nx_total{input=\"file\"} 3\nx_total{input=\"webhook\"} 4\ny 1.5\n")
	}))
	defer srv.Close()
	got := Scrape(strings.TrimPrefix(srv.URL, "http://"))
	if got["x_total"] != 7 || got["y"] != 1.5 || len(got) != 2 {
		t.Fatalf("Scrape = %v, want x_total 7 and y 1.5", got)
	}
	if got := Scrape("127.0.0.1:1"); len(got) != 0 {
		t.Fatalf("unreachable page: %v", got)
	}
}

func TestMemoryOfThisProcess(t *testing.T) {
	peak, rss, err := Memory(os.Getpid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	if rss <= 0 || peak < rss {
		t.Fatalf("peak %d, rss %d: want 0 < rss <= peak", peak, rss)
	}
}
