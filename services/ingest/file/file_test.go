package file_test

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/ingest/file"
	"github.com/auditlens/auditlens/services/ingest/input"
	"github.com/auditlens/auditlens/services/ingest/internal/testbin"
	"github.com/auditlens/auditlens/services/ingest/internal/testlog"
	"github.com/auditlens/auditlens/services/ingest/internal/testnats"
	"github.com/auditlens/auditlens/services/ingest/metrics"
)

var ingestBin string

func TestMain(m *testing.M) { testbin.Main(m, &ingestBin) }

// running is a started file input.
type running struct {
	cancel  context.CancelFunc
	done    chan error
	stopped bool
	comps   []daemon.Component
	reg     *prometheus.Registry
}

func (r *running) stop(t testing.TB) {
	t.Helper()
	if r.stopped {
		return
	}
	r.stopped = true
	r.cancel()
	if err := <-r.done; err != nil {
		t.Fatalf("file input: %v", err)
	}
}

// start runs the file input on cfg, with the options ingest gives it by default changed by
// tune.
func start(t testing.TB, cfg file.Config, b bus.Bus, tune ...func(*input.Env)) *running {
	t.Helper()
	reg := prometheus.NewRegistry()
	env := input.Env{Bus: b, Cluster: "test", Node: "node-1", MaxEventSize: 1000000, Logger: testlog.Logger(t), Registry: reg, Metrics: metrics.New(reg)}
	for _, f := range tune {
		f(&env)
	}
	in, err := file.New(cfg, input.MustEnv(env))
	if err != nil {
		t.Fatal(err)
	}
	comps := []daemon.Component{in}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1), comps: comps, reg: reg}
	go func() { r.done <- daemon.RunStages(ctx, comps, testlog.Logger(t)) }()
	t.Cleanup(func() {
		if !r.stopped { // the test failed before stopping it
			r.stopped = true
			cancel()
			if err := <-r.done; err != nil {
				t.Logf("file input stopped after the failure: %v", err)
			}
		}
	})
	return r
}

func fileConfig(t testing.TB, path string) file.Config {
	cfg := file.DefaultConfig(t.TempDir())
	cfg.Path, cfg.PollInterval, cfg.BatchSize = path, 10*time.Millisecond, 500
	return cfg
}

// TestFileRotationAndBadLines follows a log rotated by rename (plain and gzip) and by
// copytruncate while it is written, with bad lines in it.
func TestFileRotationAndBadLines(t *testing.T) {
	ev := testlog.Load(t)
	n := testnats.Start(t)
	b := n.Open(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	w := testlog.NewWriter(t, path)
	cfg := fileConfig(t, path)
	r := start(t, cfg, b)
	const total = 3000
	var want []string
	bad := []string{"not json at all", `{"kind":"Event","no":"auditID"}`, "\xff\xfe{}", `["an array"]`}
	for i := 0; i < total; i++ {
		line, id := ev.Event(i)
		want = append(want, id)
		if err := w.Line(line); err != nil {
			t.Fatal(err)
		}
		if i%700 == 100 {
			if err := w.Line([]byte(bad[(i/700)%len(bad)])); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		switch i % 1000 {
		case 250:
			_, err = w.Rotate(false)
		case 500:
			_, err = w.Rotate(true)
		case 750:
			_, err = w.CopyTruncate()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 90*time.Second, "every line on the bus", func() bool {
		return n.Count(t, bus.Events) >= total && n.Count(t, bus.DeadLetter) >= 5
	})
	in := r.comps[0].(*file.Input)
	testkit.Eventually(t, 90*time.Second, "no lag and no checkpoint waiting", func() bool { return in.LagBytes() == 0 && in.CheckpointAge() == 0 })
	r.stop(t)
	msgs := n.Messages(t, bus.Events)
	testnats.CheckExactlyOnce(t, msgs, want)
	for _, m := range msgs[:10] {
		if m.Header.Get(bus.HeaderNode) != "node-1" || m.Subject != "auditlens.events.test" {
			t.Fatalf("message headers %v subject %s", m.Header, m.Subject)
		}
	}
	dl := n.Messages(t, bus.DeadLetter)
	if len(dl) != 5 {
		t.Errorf("%d dead letters, want 5", len(dl))
	}
	for _, m := range dl {
		if m.Header.Get(bus.HeaderReason) == "" || !regexp.MustCompile(`audit.*\.log(\.gz)?:[0-9]+$`).MatchString(m.Header.Get(bus.HeaderSource)) || m.Header.Get(bus.HeaderNode) != "node-1" {
			t.Errorf("dead letter without reason, file:offset or node: %v", m.Header)
		}
	}
	if got := testutil.ToFloat64(mustCounter(t, r.reg, "auditlens_ingest_events_published_total")); got != total {
		t.Errorf("events_published_total = %v, want %d", got, total)
	}
	if got := testutil.ToFloat64(mustCounter(t, r.reg, "auditlens_ingest_bad_lines_total")); got != 5 {
		t.Errorf("bad_lines_total = %v, want 5", got)
	}
	if got := testutil.ToFloat64(mustCounter(t, r.reg, "auditlens_ingest_lines_read_total")); got != total+5 {
		t.Errorf("lines_read_total = %v, want %d", got, total+5)
	}
}

// mustCounter sums every series of a metric family as one collector.
func mustCounter(t testing.TB, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	found := false
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		found = true
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	if !found {
		t.Fatalf("metric %s not registered", name)
	}
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sum"}, func() float64 { return sum })
}

// TestBusOutage stops the bus while the log is written and brings it back on the same
// store and port: every event arrives once, and readiness reflected the outage.
func TestBusOutage(t *testing.T) {
	ev := testlog.Load(t)
	n := testnats.Start(t)
	b := n.Open(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	w := testlog.NewWriter(t, path)
	r := start(t, fileConfig(t, path), b)
	var want []string
	write := func(from, to int) {
		for i := from; i < to; i++ {
			line, id := ev.Event(i)
			want = append(want, id)
			if err := w.Line(line); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(0, 500)
	testkit.Eventually(t, 90*time.Second, "first events", func() bool { return n.Count(t, bus.Events) == 500 })
	n.Stop()
	write(500, 1500)
	if _, err := w.Rotate(true); err != nil {
		t.Fatal(err)
	}
	write(1500, 2000)
	testkit.Eventually(t, 90*time.Second, "readiness to report the outage", func() bool { return b.Ready() != nil || r.comps[0].Ready() != nil })
	in := r.comps[0].(*file.Input)
	testkit.Eventually(t, 90*time.Second, "lag and checkpoint age to show the outage", func() bool { return in.LagBytes() > 0 && in.CheckpointAge() > 0 })
	// Lines written during the outage count as lag at once, though reading has stopped.
	lag := in.LagBytes()
	write(2000, 2100)
	testkit.Eventually(t, 90*time.Second, "lag to grow with the log during the outage", func() bool { return in.LagBytes() > lag })
	n.Start()
	testkit.Eventually(t, 90*time.Second, "every event after the outage", func() bool { return n.Count(t, bus.Events) >= 2100 })
	testkit.Eventually(t, 90*time.Second, "readiness to recover", func() bool { return b.Ready() == nil && r.comps[0].Ready() == nil })
	testkit.Eventually(t, 90*time.Second, "lag to drain", func() bool { return in.LagBytes() == 0 && in.CheckpointAge() == 0 })
	r.stop(t)
	testnats.CheckExactlyOnce(t, n.Messages(t, bus.Events), want)
}

// TestKill9 kills an ingest process mid-file and restarts it: the stream holds every event
// exactly once.
func TestKill9(t *testing.T) {
	ev := testlog.Load(t)
	n := testnats.Start(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	ckpt := filepath.Join(dir, "ckpt")
	w := testlog.NewWriter(t, path)
	const total = 30000
	var want []string
	for i := 0; i < total; i++ {
		line, id := ev.Event(i)
		want = append(want, id)
		if err := w.Line(line); err != nil {
			t.Fatal(err)
		}
		if i == total/2 {
			if _, err := w.Rotate(true); err != nil {
				t.Fatal(err)
			}
		}
	}
	run := func() *exec.Cmd {
		cmd := exec.Command(ingestBin, "--audit-log", path, "--checkpoint-dir", ckpt, "--nats-url", n.URL(),
			"--cluster", "test", "--metrics-addr", "", "--audit-log-batch-size", "200", "--log-format", "json")
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

// An event larger than the bus accepts (the embedded server's 8 MiB max payload, under a
// --max-event-size set above it) is a permanent refusal: it goes to the dead-letter stream,
// cut to its first 64 KiB, and the lines around it are published; nothing waits forever.
func TestEventLargerThanTheBusIsDeadLettered(t *testing.T) {
	ev := testlog.Load(t)
	n := testnats.Start(t)
	b := n.Open(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	w := testlog.NewWriter(t, path)
	r := start(t, fileConfig(t, path), b, func(o *input.Env) { o.MaxEventSize = 16 << 20 })
	var want []string
	for i := range 20 {
		line, id := ev.Event(i)
		if i == 10 {
			// A genuine event with a 9 MiB annotation value.
			big := bytes.Replace(line, []byte(`"annotations":{`), []byte(`"annotations":{"x":"`+strings.Repeat("a", 9<<20)+`",`), 1)
			if len(big) == len(line) {
				t.Fatal("event 10 has no annotations to grow")
			}
			line = big
		} else {
			want = append(want, id)
		}
		if err := w.Line(line); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 90*time.Second, "the other events and a dead letter", func() bool {
		return n.Count(t, bus.Events) >= uint64(len(want)) && n.Count(t, bus.DeadLetter) >= 1
	})
	r.stop(t)
	testnats.CheckExactlyOnce(t, n.Messages(t, bus.Events), want)
	dl := n.Messages(t, bus.DeadLetter)
	if len(dl) != 1 || len(dl[0].Data) != 64<<10 || !strings.Contains(dl[0].Header.Get(bus.HeaderReason), "larger than the bus accepts") {
		t.Fatalf("dead letters: %d, first %d bytes, reason %q", len(dl), len(dl[0].Data), dl[0].Header.Get(bus.HeaderReason))
	}
}
