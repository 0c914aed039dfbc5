package file_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/envelope"
	"github.com/auditlens/auditlens/lib/envelope/envelopetest"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/ingest/internal/testlog"
	"github.com/auditlens/auditlens/services/ingest/internal/testnats"
)

// aksRecords is an Event Hubs body of Azure diagnostic records around events, with one
// kube-apiserver (klog) record that holds none, as AKS diagnostic settings send it.
func aksRecords(t testing.TB, events [][]byte) []byte {
	t.Helper()
	const id = "/SUBSCRIPTIONS/0000/RESOURCEGROUPS/RG/PROVIDERS/MICROSOFT.CONTAINERSERVICE/MANAGEDCLUSTERS/AKS-1"
	recs := []map[string]any{{"category": "kube-apiserver", "resourceId": id, "properties": map[string]any{"log": "I1130 12:00:00.000000       1 server.go:1] klog text\n"}}}
	for _, ev := range events {
		recs = append(recs, map[string]any{"category": "kube-audit", "resourceId": id, "operationName": "Microsoft.ContainerService/managedClusters/diagnosticLogs/Read",
			"properties": map[string]any{"log": string(ev) + "\n", "stream": "stdout", "pod": "kube-apiserver-0"}})
	}
	b, err := json.Marshal(map[string]any{"records": recs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// envelopeLog writes lines of envelopes, each holding per events: AKS records and (BUILT:
// no genuine EKS envelope is public) CloudWatch subscription payloads, plain, gzip+base64,
// and export lines, with plain events and control messages between them.
func envelopeLog(t testing.TB, w *testlog.Writer, ev testlog.Events, lines, per int) []string {
	t.Helper()
	var want []string
	n := 0
	next := func(k int) [][]byte {
		var out [][]byte
		for range k {
			line, id := ev.Event(n)
			n++
			want = append(want, id)
			out = append(out, line)
		}
		return out
	}
	for i := range lines {
		var line []byte
		switch i % 5 {
		case 0:
			line = aksRecords(t, next(per))
		case 1:
			line = envelopetest.Subscription(next(per))
		case 2:
			line = []byte(strings.TrimSpace(string(envelopetest.Shapes(next(per))[2].Data))) // base64 of gzip (Kinesis)
		case 3:
			line = next(1)[0]
		case 4:
			evs := next(1)
			line = []byte("2026-11-30T12:00:00.000Z " + string(evs[0]))
			if err := w.Line(envelopetest.Control()); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Line(line); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

// TestEnvelopeLines: a log mixing plain events and cloud envelopes gives every event once,
// each with the envelope annotation; records without audit events are skipped, not
// dead-lettered; a bad event inside an envelope is dead-lettered alone.
func TestEnvelopeLines(t *testing.T) {
	ev := testlog.Load(t)
	n := testnats.Start(t)
	b := n.Open(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	w := testlog.NewWriter(t, path)
	want := envelopeLog(t, w, ev, 100, 7)
	good, _ := ev.Event(1 << 20)
	want = append(want, func() string { _, id := ev.Event(1 << 20); return id }())
	if err := w.Line(envelopetest.Subscription([][]byte{good, []byte(`{"kind":"Event","apiVersion":"audit.k8s.io/v1"}`)})); err != nil {
		t.Fatal(err)
	}
	gke, err := os.ReadFile("../../../lib/envelope/testdata/managed/gke-logentry-sekoia.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Line([]byte(strings.TrimSpace(string(gke)))); err != nil {
		t.Fatal(err)
	}
	r := start(t, fileConfig(t, path), b)
	testkit.Eventually(t, 90*time.Second, "every event and a dead letter", func() bool {
		return n.Count(t, bus.Events) >= uint64(len(want)+1) && n.Count(t, bus.DeadLetter) >= 1
	})
	r.stop(t)
	msgs := n.Messages(t, bus.Events)
	var gkeMsg string
	var rest = msgs[:0]
	for _, m := range msgs {
		if strings.Contains(string(m.Data), `"gke/logentry"`) {
			gkeMsg = string(m.Data)
			continue
		}
		rest = append(rest, m)
	}
	testnats.CheckExactlyOnce(t, rest, want)
	if !strings.Contains(gkeMsg, `"verb":"update"`) || !strings.Contains(gkeMsg, `"resource":"configmaps"`) {
		t.Errorf("GKE entry not converted: %s", gkeMsg)
	}
	vias := map[string]int{}
	for _, m := range rest {
		for _, v := range []string{"aks/diagnostic-records", "eks/cloudwatch-subscription", "eks/base64/gzip/cloudwatch-subscription", "eks/cloudwatch-export"} {
			if strings.Contains(string(m.Data), `"`+envelope.Annotation+`":"`+v+`"`) {
				vias[v]++
			}
		}
	}
	if vias["aks/diagnostic-records"] != 20*7 || vias["eks/cloudwatch-subscription"] != 20*7+1 || vias["eks/base64/gzip/cloudwatch-subscription"] != 20*7 || vias["eks/cloudwatch-export"] != 20 {
		t.Errorf("events by envelope: %v", vias)
	}
	if dl := n.Messages(t, bus.DeadLetter); len(dl) != 1 {
		t.Errorf("%d dead letters, want 1 (the bad event in an envelope)", len(dl))
	}
}

// TestEnvelopeKill9 kills ingest -9 while it reads a log of envelope lines (20 events each)
// and restarts it: every event is stored exactly once, so no line was acknowledged before
// all of its events were.
func TestEnvelopeKill9(t *testing.T) {
	ev := testlog.Load(t)
	n := testnats.Start(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	ckpt := filepath.Join(dir, "ckpt")
	w := testlog.NewWriter(t, path)
	want := envelopeLog(t, w, ev, 2500, 20)
	total := uint64(len(want))
	run := func() *exec.Cmd {
		cmd := exec.Command(ingestBin, "--audit-log", path, "--checkpoint-dir", ckpt, "--nats-url", n.URL(),
			"--cluster", "test", "--metrics-addr", "", "--audit-log-batch-size", "50", "--log-format", "json")
		cmd.Stderr = t.Output()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	cmd := run()
	testkit.Eventually(t, 90*time.Second, "ingest to publish part of the file", func() bool { return n.Count(t, bus.Events) >= total/10 })
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	got := n.Count(t, bus.Events)
	if got >= total {
		t.Fatalf("the whole file was published before the kill (%d); make it longer", got)
	}
	t.Logf("killed after %d of %d events", got, total)
	cmd = run()
	testkit.Eventually(t, 90*time.Second, "every event after the restart", func() bool { return n.Count(t, bus.Events) >= total })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("ingest after SIGTERM: %v", err)
	}
	testnats.CheckExactlyOnce(t, n.Messages(t, bus.Events), want)
}
