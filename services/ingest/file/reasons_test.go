package file_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/ingest/input"
	"github.com/auditlens/auditlens/services/ingest/internal/testlog"
	"github.com/auditlens/auditlens/services/ingest/internal/testnats"
)

// Every kind of bad line is counted under its label of the reason vocabulary (lib/reason),
// the labels auditlens_ingest_bad_lines_total had before the vocabulary moved there: the
// tailer's own errors (too long, cut-off last line) as much as the decoder's.
func TestBadLineReasons(t *testing.T) {
	ev := testlog.Load(t)
	n := testnats.Start(t)
	b := n.Open(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	w := testlog.NewWriter(t, path)
	const maxEvent = 16 << 10
	r := start(t, fileConfig(t, path), b, func(o *input.Env) { o.MaxEventSize = maxEvent })
	good, _ := ev.Event(0)
	for _, line := range []string{
		"not json at all",
		"\xff\xfe{}",
		`{"kind":"Event","no":"auditID"}`,
		`{"kind":"Event","auditID":"` + strings.Repeat("a", maxEvent) + `"}`,
		string(good),
	} {
		if err := w.Line([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	// The last line of a rotated file that never got its newline.
	if err := w.Write([]byte(`{"kind":"Event","auditID":"cut`)); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Rotate(false); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"not_json": 1, "invalid_utf8": 1, "not_audit_event": 1, "too_large": 1, "incomplete_line": 1}
	testkit.Eventually(t, 90*time.Second, "a dead letter for every bad line", func() bool { return n.Count(t, bus.DeadLetter) >= 5 })
	r.stop(t)
	for label, v := range want {
		if got := metricValue(t, r.reg, "auditlens_ingest_bad_lines_total", "reason", label); got != v {
			t.Errorf("bad_lines_total{reason=%q} = %v, want %v", label, got, v)
		}
	}
	if got := metricValue(t, r.reg, "auditlens_ingest_bad_lines_total", "reason", "other"); got != 0 {
		t.Errorf("bad_lines_total{reason=\"other\"} = %v, want 0", got)
	}
}
