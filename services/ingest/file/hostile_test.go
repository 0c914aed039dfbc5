package file_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/ingest/checkpoint"
	"github.com/auditlens/auditlens/services/ingest/file"
	"github.com/auditlens/auditlens/services/ingest/input"
	"github.com/auditlens/auditlens/services/ingest/internal/testlog"
	"github.com/auditlens/auditlens/services/ingest/internal/testnats"
)

// hugeAuditID returns event i of ev with an auditID of n bytes, as the apiserver writes it
// when a client sends such an Audit-ID header.
func hugeAuditID(t *testing.T, ev testlog.Events, i, n int) []byte {
	t.Helper()
	line, id := ev.Event(i)
	auditID, _, _ := strings.Cut(id, "/")
	big := bytes.Replace(line, []byte(`"auditID":"`+auditID+`"`), []byte(`"auditID":"`+strings.Repeat("A", n)+`"`), 1)
	if len(big) == len(line) {
		t.Fatal("event has no auditID to grow")
	}
	return big
}

// Issue 9, defect 1: on a server with the stock 1 MiB max payload, an event whose auditID is
// ~1 MB was refused for its size (its id as large as its data), and so was its dead letter,
// named after that id: ingest spun on it for good. Now ids are bounded (that event is
// published under a shortened id), an event larger than the bus accepts goes to a bounded
// dead letter, the checkpoint moves past both, the events after them are published and the
// input stays ready.
func TestHugeAuditIDDoesNotStopIngestion(t *testing.T) {
	ev := testlog.Load(t)
	n := testnats.StartStock(t)
	b := n.Open(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	w := testlog.NewWriter(t, path)
	cfg := fileConfig(t, path)
	// above the bus's limit, so that the bus refuses line 20
	r := start(t, cfg, b, func(o *input.Env) { o.MaxEventSize = 4 << 20 })
	var want []string
	for i := range 30 {
		line, id := ev.Event(i)
		switch i {
		case 10:
			line = hugeAuditID(t, ev, i, 990000)
			_, stage, _ := strings.Cut(id, "/")
			want = append(want, strings.TrimPrefix(bus.BoundID("test/"+strings.Repeat("A", 990000)+"/"+stage), "test/"))
		case 20:
			line = hugeAuditID(t, ev, i, 1500000)
		default:
			want = append(want, id)
		}
		if err := w.Line(line); err != nil {
			t.Fatal(err)
		}
	}
	in := r.comps[0].(*file.Input)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.Open(cfg.CheckpointDir, path)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 90*time.Second, "the checkpoint to move past the whole file", func() bool {
		p, ok, err := store.Load()
		return err == nil && ok && p.Offset == fi.Size()
	})
	if err := in.Ready(); err != nil {
		t.Errorf("not ready once the file is done: %v", err)
	}
	if got := metricValue(t, r.reg, "auditlens_ingest_publish_retries_total", "", ""); got > 0 {
		t.Errorf("%v publish retries: the refusal was treated as an outage", got)
	}
	r.stop(t)
	testnats.CheckExactlyOnce(t, n.Messages(t, bus.Events), want)
	dl := n.Messages(t, bus.DeadLetter)
	if len(dl) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dl))
	}
	h := dl[0].Header
	if len(h.Get(jetstream.MsgIDHeader)) > bus.MaxIDLen || !strings.Contains(h.Get(bus.HeaderReason), "larger than the bus accepts") ||
		h.Get(bus.HeaderTruncated) == "" || len(dl[0].Data) != bus.DeadLetterMaxData || !strings.HasSuffix(h.Get(bus.HeaderSource), ":"+strconv.Itoa(offsetOfLine(t, path, 20))) {
		t.Errorf("dead letter: id of %d bytes, headers %v, %d bytes", len(h.Get(jetstream.MsgIDHeader)), shortHeaders(h), len(dl[0].Data))
	}
	if got := metricValue(t, r.reg, "auditlens_ingest_bad_lines_total", "reason", "too_large_for_bus"); got != 1 {
		t.Errorf("bad_lines_total{reason=too_large_for_bus} = %v, want 1", got)
	}
}

// offsetOfLine is where line n (from 0) of the file at path starts.
func offsetOfLine(t *testing.T, path string, n int) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off := 0
	for range n {
		off += bytes.IndexByte(data[off:], '\n') + 1
	}
	return off
}

// shortHeaders is h with long values cut, for messages.
func shortHeaders(h nats.Header) map[string]string {
	out := map[string]string{}
	for k := range h {
		out[k] = bus.Short(h.Get(k), 80)
	}
	return out
}

// metricValue sums the series of metric name whose label has value ("" label: all series).
func metricValue(t testing.TB, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				match = match || l.GetName() == label && l.GetValue() == value
			}
			if match {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// Issue 9, defect 3: a checkpoint save that fails (the directory gone, as on a full or
// read-only disk) was logged once and then nothing: ready, checkpoint age and lag 0. Now it
// is retried, counted, fails readiness and shows in the age and lag until a save succeeds.
func TestCheckpointSaveFailureIsReported(t *testing.T) {
	ev := testlog.Load(t)
	n := testnats.Start(t)
	b := n.Open(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	w := testlog.NewWriter(t, path)
	cfg := fileConfig(t, path)
	r := start(t, cfg, b)
	in := r.comps[0].(*file.Input)
	write := func(from, to int) {
		for i := from; i < to; i++ {
			line, _ := ev.Event(i)
			if err := w.Line(line); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(0, 100)
	testkit.Eventually(t, 90*time.Second, "the first checkpoint", func() bool {
		return metricValue(t, r.reg, "auditlens_ingest_checkpoint_last_saved_timestamp_seconds", "", "") > 0 && in.CheckpointAge() == 0
	})
	// The checkpoint directory becomes unusable: a file where it was. Moved away in one step
	// (RemoveAll races with a save creating its temporary file there).
	if err := os.Rename(cfg.CheckpointDir, cfg.CheckpointDir+".gone"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.CheckpointDir, []byte("in the way"), 0o600); err != nil {
		t.Fatal(err)
	}
	write(100, 200)
	testkit.Eventually(t, 90*time.Second, "the events after the failure", func() bool { return n.Count(t, bus.Events) == 200 })
	testkit.Eventually(t, 90*time.Second, "readiness, age, lag and the error counter to show the failing saves", func() bool {
		return in.Ready() != nil && in.CheckpointAge() > 0 && in.LagBytes() > 0 &&
			metricValue(t, r.reg, "auditlens_ingest_checkpoint_save_errors_total", "", "") >= 2
	})
	if err := in.Ready(); !strings.Contains(err.Error(), "checkpoint") {
		t.Errorf("readiness error %q does not name the checkpoint", err)
	}
	if err := os.Remove(cfg.CheckpointDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(cfg.CheckpointDir, 0o700); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 90*time.Second, "saving to recover without new lines", func() bool {
		return in.Ready() == nil && in.CheckpointAge() == 0 && in.LagBytes() == 0
	})
	r.stop(t)
	store, err := checkpoint.Open(cfg.CheckpointDir, path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok, err := store.Load(); err != nil || !ok || p.Offset != fi.Size() {
		t.Errorf("checkpoint after recovery: %+v %v %v, want offset %d", p, ok, err, fi.Size())
	}
}
