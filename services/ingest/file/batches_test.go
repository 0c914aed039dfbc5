package file_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/ingest/file"
	"github.com/auditlens/auditlens/services/ingest/input"
	"github.com/auditlens/auditlens/services/ingest/internal/testlog"
	"github.com/auditlens/auditlens/services/ingest/internal/testnats"
)

// TestSameRangeReadAgainIsStoredOnce: the file input publishes runs of events as EventBatch
// messages named by the file and the byte range; reading the same file again from the start
// (a checkpoint lost, or a crash before it was saved) publishes the same messages, and the
// bus stores each once.
func TestSameRangeReadAgainIsStoredOnce(t *testing.T) {
	ev := testlog.Load(t)
	n := testnats.Start(t)
	b := n.Open(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	w := testlog.NewWriter(t, path)
	const total = 2000
	want := w.Events(t, ev, 0, total)
	cfg := fileConfig(t, path)
	cfg.BatchSize = 300
	batch := eventbatch.DefaultConfig()
	batch.MaxEvents = 128
	run := func() {
		r := start(t, cfg, b, func(o *input.Env) { o.Batch = batch })
		testkit.Eventually(t, 90*time.Second, "every event on the bus", func() bool { return n.Count(t, bus.Events) >= total })
		in := r.comps[0].(*file.Input)
		testkit.Eventually(t, 90*time.Second, "everything checkpointed", func() bool { return in.LagBytes() == 0 && in.CheckpointAge() == 0 })
		r.stop(t)
	}
	run()
	stored := n.Stored(t, bus.Events)
	// 300-line reads cut into batches of at most 128 events: 3 messages per read.
	if stored < total/128 || stored > 3*(total/300+1) {
		t.Fatalf("%d messages for %d events: not batches of at most 128", stored, total)
	}
	msgs := n.Messages(t, bus.Events)
	source := regexp.MustCompile(`/audit\.log:[0-9]+-[0-9]+$`)
	for _, m := range msgs {
		if m.Header.Get(testnats.HeaderBatchID) == "" || !source.MatchString(m.Header.Get(bus.HeaderSource)) || m.Header.Get(bus.HeaderNode) != "node-1" {
			t.Fatalf("event not in a batch named by its byte range: %v", m.Header)
		}
	}
	// Forget the position: the whole file is read and published again.
	if err := os.RemoveAll(cfg.CheckpointDir); err != nil {
		t.Fatal(err)
	}
	run()
	if again := n.Stored(t, bus.Events); again != stored {
		t.Errorf("the file read again: %d messages stored, want the same %d (same ranges, same ids)", again, stored)
	}
	testnats.CheckExactlyOnce(t, n.Messages(t, bus.Events), want)
}

// TestBatchesOffPublishesOneMessagePerEvent: --bus-batch-max-events 1 is the format before
// batches, one message per event under its own id.
func TestBatchesOffPublishesOneMessagePerEvent(t *testing.T) {
	ev := testlog.Load(t)
	n := testnats.Start(t)
	b := n.Open(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	w := testlog.NewWriter(t, path)
	want := w.Events(t, ev, 0, 300)
	r := start(t, fileConfig(t, path), b, func(o *input.Env) { o.Batch.MaxEvents, o.Batch.MaxBytes, o.Batch.Compression = 1, 1, "none" })
	testkit.Eventually(t, 90*time.Second, "every event on the bus", func() bool { return n.Stored(t, bus.Events) >= 300 })
	r.stop(t)
	msgs := n.Messages(t, bus.Events)
	for _, m := range msgs {
		if m.Header.Get(testnats.HeaderBatchID) != "" {
			t.Fatal("a batch with batches off")
		}
	}
	testnats.CheckExactlyOnce(t, msgs, want)
}
