package cloudwatch_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/ingest/cloudwatch"
	"github.com/auditlens/auditlens/services/ingest/input"
	"github.com/auditlens/auditlens/services/ingest/internal/testlog"
	"github.com/auditlens/auditlens/services/ingest/internal/testnats"
	"github.com/auditlens/auditlens/services/ingest/metrics"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).Start.func1"))
}

const (
	group   = "/aws/eks/demo/cluster"
	cluster = "demo"
)

// load reads testdata/events.jsonl: genuine audit events (see testdata/README.md).
func load(t testing.TB) testlog.Events {
	b, err := os.ReadFile("testdata/events.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var ev testlog.Events
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		ev = append(ev, bytes.Clone(sc.Bytes()))
	}
	if len(ev) == 0 {
		t.Fatal("no events in testdata/events.jsonl")
	}
	return ev
}

// awsEnv gives the SDK's default chain static test credentials and a region, and keeps it
// away from this machine's shared config and the instance metadata service.
func awsEnv(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTESTCLOUDWATCH")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// feed adds events n..m-1 to the fake log group, spread over three API servers' audit
// streams, 10 ms apart from base; it returns their keys ("auditID/stage").
func feed(f *fakeLogs, ev testlog.Events, n, m int, base time.Time) []string {
	var want []string
	for i := n; i < m; i++ {
		line, key := ev.Event(i)
		f.add(fmt.Sprintf("kube-apiserver-audit-%d", i%3), base.Add(time.Duration(i)*10*time.Millisecond).UnixMilli(), string(line))
		want = append(want, key)
	}
	return want
}

type run struct {
	t      *testing.T
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, s *cloudwatch.Source) *run {
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{t: t, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- s.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *run) stop() {
	r.cancel()
	if err := <-r.done; err != nil {
		r.t.Errorf("Run: %v", err)
	}
	r.done <- nil // later stops return at once
}

func newSource(t *testing.T, url, dir string, b input.Bus, m *metrics.Ingest) *cloudwatch.Source {
	t.Helper()
	cfg := cloudwatch.DefaultConfig()
	cfg.LogGroup, cfg.Endpoint, cfg.Start, cfg.PollInterval, cfg.CheckpointDir = group, url, "1h", 20*time.Millisecond, dir
	s, err := cloudwatch.New(context.Background(), cfg, input.MustEnv(input.Env{Bus: b, Cluster: "fallback", Node: "n1", MaxEventSize: 1 << 20, Logger: testlog.Logger(t), Metrics: m}))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSource: events of the audit streams, read page by page, land on the bus under the
// cluster the log group names, each once, with the envelope annotation; another stream of
// the group is not read; a bad event is dead-lettered and counted; events arriving while the
// reader runs, one of them late (older than the newest stored), are read too.
func TestSource(t *testing.T) {
	awsEnv(t)
	ev := load(t)
	n := testnats.Start(t)
	b := n.Open(t)
	f, srv := newFakeLogs(t, group, 40)
	base := time.Now().Add(-30 * time.Minute)
	want := feed(f, ev, 0, 250, base)
	f.add("authenticator-abc", base.UnixMilli(), `time="2026-11-30T10:00:00Z" level=info msg="access granted"`)
	f.add("kube-apiserver-audit-1", base.Add(time.Second).UnixMilli(), `{"kind":"Event","apiVersion":"audit.k8s.io/v1","auditID":"cut-at-256kb","stage":"ResponseCompl`)
	m := metrics.New(nil)
	s := newSource(t, srv.URL, t.TempDir(), b, m)
	r := start(t, s)
	testkit.Eventually(t, time.Minute, "the first 250 events stored", func() bool { return n.Count(t, bus.Events) >= 250 })

	// Arriving while it runs: new events, and one 30 s older than the newest stored (within
	// the overlap), as CloudWatch accepts a late event from another API server.
	newest := base.Add(249 * 10 * time.Millisecond)
	want = append(want, feed(f, ev, 250, 300, base)...)
	line, key := ev.Event(300)
	f.add("kube-apiserver-audit-2", newest.Add(-30*time.Second).UnixMilli(), string(line))
	want = append(want, key)
	testkit.Eventually(t, time.Minute, "every event stored", func() bool { return n.Count(t, bus.Events) >= uint64(len(want)) })
	// A run is counted once its acknowledgement is back, which can be after the stream shows
	// it: wait for the count before stopping (a publish cut by the stop is stored but
	// uncounted until it is published again).
	testkit.Eventually(t, time.Minute, "every stored event counted", func() bool {
		return testutil.ToFloat64(m.Published.WithLabelValues(cloudwatch.Input)) >= float64(len(want))
	})
	r.stop()

	msgs := n.Messages(t, bus.Events)
	testnats.CheckExactlyOnce(t, msgs, want)
	if stored := n.Stored(t, bus.Events); stored*10 > uint64(len(want)) {
		t.Errorf("%d messages on the bus for %d events: want a page's events in batches", stored, len(want))
	}
	for _, msg := range msgs {
		if !strings.HasSuffix(msg.Subject, "."+cluster) {
			t.Fatalf("event on %s, want the cluster of the log group (%s)", msg.Subject, cluster)
		}
	}
	if !bytes.Contains(msgs[0].Data, []byte(`"auditlens.io/envelope":"eks/filter-log-events"`)) {
		t.Errorf("event without the envelope annotation: %.300s", msgs[0].Data)
	}
	dead := n.Messages(t, bus.DeadLetter)
	if len(dead) != 1 || dead[0].Header.Get(bus.HeaderReasonLabel) == "" || !bytes.Contains(dead[0].Data, []byte("cut-at-256kb")) {
		t.Fatalf("dead letters: %d, want the cut event (%v)", len(dead), dead)
	}
	label := dead[0].Header.Get(bus.HeaderReasonLabel)
	if got := testutil.ToFloat64(m.Bad.WithLabelValues(cloudwatch.Input, label)); got != 1 {
		t.Errorf("bad events counted %v under %s, want 1", got, label)
	}
	if got := testutil.ToFloat64(m.Published.WithLabelValues(cloudwatch.Input)); got != float64(len(want)) {
		t.Errorf("published counted %v, want %d", got, len(want))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unsigned != 0 || f.calls == 0 {
		t.Errorf("%d of %d requests without the credentials of the default chain", f.unsigned, f.calls)
	}
}

// TestRestart stops the reader in the middle of the log group and starts another on the same
// checkpoint directory: every event is stored once, and the two together publish each event
// once (the second skips what the first stored).
func TestRestart(t *testing.T) {
	awsEnv(t)
	ev := load(t)
	n := testnats.Start(t)
	b := n.Open(t)
	f, srv := newFakeLogs(t, group, 10)
	want := feed(f, ev, 0, 2000, time.Now().Add(-50*time.Minute))
	dir := t.TempDir()
	m1 := metrics.New(nil)
	r := start(t, newSource(t, srv.URL, dir, b, m1))
	testkit.Eventually(t, time.Minute, "part of the log group stored", func() bool { return n.Count(t, bus.Events) >= 300 })
	r.stop()
	first := testutil.ToFloat64(m1.Published.WithLabelValues(cloudwatch.Input))
	if int(first) >= len(want) {
		t.Fatal("everything was stored before the stop; feed more")
	}
	m2 := metrics.New(nil)
	r = start(t, newSource(t, srv.URL, dir, b, m2))
	testkit.Eventually(t, time.Minute, "every event after the restart", func() bool { return n.Count(t, bus.Events) >= uint64(len(want)) })
	r.stop()
	testnats.CheckExactlyOnce(t, n.Messages(t, bus.Events), want)
	second := testutil.ToFloat64(m2.Published.WithLabelValues(cloudwatch.Input))
	t.Logf("published %v before the restart, %v after", first, second)
	if first+second != float64(len(want)) {
		t.Errorf("published %v + %v events, want %d: the restart published stored events again", first, second, len(want))
	}
}

// position reads the saved position of the reader in dir, as a restart would.
func position(t *testing.T, dir string) cloudwatch.Position {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "cloudwatch-*.json"))
	if len(files) != 1 {
		t.Fatalf("position files %v, want one", files)
	}
	p, err := cloudwatch.LoadPosition(dir, group, cloudwatch.DefaultConfig().StreamPrefix)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBusDown: while the bus is down the reader retries and its position does not move;
// when the bus is back, what arrived meanwhile is stored, each event once.
func TestBusDown(t *testing.T) {
	awsEnv(t)
	ev := load(t)
	n := testnats.Start(t)
	b := n.Open(t)
	f, srv := newFakeLogs(t, group, 25)
	base := time.Now().Add(-20 * time.Minute)
	want := feed(f, ev, 0, 100, base)
	dir := t.TempDir()
	m := metrics.New(nil)
	r := start(t, newSource(t, srv.URL, dir, b, m))
	testkit.Eventually(t, time.Minute, "the first events stored", func() bool { return n.Count(t, bus.Events) >= 100 })
	testkit.Eventually(t, time.Minute, "the position after them", func() bool { return len(position(t, dir).Seen) >= 100 })

	n.Stop()
	before := position(t, dir)
	want = append(want, feed(f, ev, 100, 200, base)...)
	testkit.Eventually(t, time.Minute, "publishes retried while the bus is down", func() bool {
		return testutil.ToFloat64(m.Retries.WithLabelValues(cloudwatch.Input)) >= 3
	})
	if after := position(t, dir); after.From != before.From || len(after.Seen) != len(before.Seen) {
		t.Fatalf("the position moved while the bus was down: from %d (%d seen) to %d (%d seen)", before.From, len(before.Seen), after.From, len(after.Seen))
	}

	n.Start()
	testkit.Eventually(t, 2*time.Minute, "every event after the bus is back", func() bool { return n.Count(t, bus.Events) >= uint64(len(want)) })
	testkit.Eventually(t, time.Minute, "the position after them", func() bool { return len(position(t, dir).Seen) >= len(want) })
	r.stop()
	testnats.CheckExactlyOnce(t, n.Messages(t, bus.Events), want)
}

// TestThrottled: while CloudWatch refuses the calls (its rate limit), the reader keeps its
// position and tries again at the next poll; nothing is lost.
func TestThrottled(t *testing.T) {
	awsEnv(t)
	ev := load(t)
	n := testnats.Start(t)
	b := n.Open(t)
	f, srv := newFakeLogs(t, group, 30)
	base := time.Now().Add(-10 * time.Minute)
	want := feed(f, ev, 0, 60, base)
	r := start(t, newSource(t, srv.URL, t.TempDir(), b, metrics.New(nil)))
	testkit.Eventually(t, time.Minute, "the first events stored", func() bool { return n.Count(t, bus.Events) >= 60 })
	f.throttleNext(8) // more than the SDK's own 3 attempts of one call
	want = append(want, feed(f, ev, 60, 120, base)...)
	testkit.Eventually(t, 2*time.Minute, "every event after the throttling", func() bool { return n.Count(t, bus.Events) >= 120 })
	r.stop()
	f.mu.Lock()
	left := f.throttle
	f.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d throttled answers not asked for", left)
	}
	testnats.CheckExactlyOnce(t, n.Messages(t, bus.Events), want)
}

// TestConfig: the flags a user can get wrong are named.
func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		change func(*cloudwatch.Config)
		want   string
	}{
		{func(c *cloudwatch.Config) { c.Start = "yesterday" }, "--cloudwatch-start"},
		{func(c *cloudwatch.Config) { c.PollInterval = 0 }, "--cloudwatch-poll-interval"},
		{func(c *cloudwatch.Config) { c.Endpoint = "localhost:4566" }, "--cloudwatch-endpoint"},
		{func(c *cloudwatch.Config) { c.Overlap = -time.Second }, "--cloudwatch-overlap"},
	} {
		c := cloudwatch.DefaultConfig()
		c.LogGroup = group
		tc.change(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want an error naming %s", err, tc.want)
		}
	}
	c := cloudwatch.DefaultConfig()
	c.LogGroup = group
	if err := c.Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// TestBacklogPositionBounded: a backlog of 5,000 events over 500 s, read in one scan of 100
// pages, leaves a position of the last overlap (2 minutes: about 1,200 ids), never a larger
// one, and writes it a few times, not once per page. Before, every page rewrote the whole
// position, which held every id of the scan until its end (here 18.5 MB written, the largest
// file 365 KB, against 92 KB and 88 KB now; the review's 200k events wrote 240 MB).
func TestBacklogPositionBounded(t *testing.T) {
	awsEnv(t)
	ev := load(t)
	n := testnats.Start(t)
	b := n.Open(t)
	f, srv := newFakeLogs(t, group, 50)
	const events = 5000
	// The wall clock, not testkit.Now: the source's first position is the wall clock minus its
	// start (cloudwatch.go); only offsets from it matter, never the date.
	base := time.Now().Add(-50 * time.Minute) // after the reader's start (--cloudwatch-start 1h)
	var want []string
	for i := range events {
		line, key := ev.Event(i)
		f.add(fmt.Sprintf("kube-apiserver-audit-%d", i%3), base.Add(time.Duration(i)*100*time.Millisecond).UnixMilli(), string(line))
		want = append(want, key)
	}
	dir := t.TempDir()
	s := newSource(t, srv.URL, dir, b, metrics.New(nil))
	r := start(t, s)
	testkit.Eventually(t, 2*time.Minute, "the backlog stored", func() bool { return n.Count(t, bus.Events) >= events })
	testkit.Eventually(t, time.Minute, "the position saved after it", func() bool {
		p := position(t, dir)
		return p.From >= base.Add(events*100*time.Millisecond-3*time.Minute).UnixMilli()
	})
	r.stop()
	testnats.CheckExactlyOnce(t, n.Messages(t, bus.Events), want)
	total, largest := s.Written()
	t.Logf("position: %d bytes written in all, largest file %d bytes, %d ids kept", total, largest, len(position(t, dir).Seen))
	if window := int64(2*time.Minute/(100*time.Millisecond)) + 50; largest > window*120 {
		t.Errorf("largest position file %d bytes: want about the overlap's %d ids (at most %d bytes)", largest, window, window*120)
	}
	if total > 4<<20 {
		t.Errorf("%d bytes of position written for one scan: want a few saves, not one per page", total)
	}
}

// TestSteadyPollsAppend: a reader keeping up with a log group (40 polls of 50 new events,
// 100 ms apart, the default 2-minute overlap holding about 1,200 ids) writes about what it
// stores, not the whole overlap at every poll. Before, every poll that stored anything
// rewrote the position whole (review 3 E16: 5.7 MB rewritten every 30 s); here that was
// about 3 MB for 2,000 events.
func TestSteadyPollsAppend(t *testing.T) {
	awsEnv(t)
	ev := load(t)
	n := testnats.Start(t)
	b := n.Open(t)
	f, srv := newFakeLogs(t, group, 50)
	const polls, per = 40, 50
	base := time.Now().Add(-50 * time.Minute)
	dir := t.TempDir()
	s := newSource(t, srv.URL, dir, b, metrics.New(nil))
	r := start(t, s)
	var want []string
	for i := range polls {
		for j := i * per; j < (i+1)*per; j++ {
			line, key := ev.Event(j)
			f.add(fmt.Sprintf("kube-apiserver-audit-%d", j%3), base.Add(time.Duration(j)*100*time.Millisecond).UnixMilli(), string(line))
			want = append(want, key)
		}
		testkit.Eventually(t, time.Minute, "the batch stored", func() bool { return n.Count(t, bus.Events) >= uint64((i+1)*per) })
	}
	testkit.Eventually(t, time.Minute, "the last batch in the position", func() bool {
		return len(position(t, dir).Seen) >= 1200
	})
	r.stop()
	testnats.CheckExactlyOnce(t, n.Messages(t, bus.Events), want)
	total, largest := s.Written()
	p := position(t, dir)
	t.Logf("position: %d bytes written for %d events, largest snapshot %d bytes, %d ids kept", total, polls*per, largest, len(p.Seen))
	if limit := 2*largest + 3*polls*per*100; total > limit {
		t.Errorf("%d bytes of position written for %d events in %d polls: want at most %d (what was stored, and a few snapshots)", total, polls*per, polls, limit)
	}
	// The loaded position is the overlap behind the newest event, with every id of it.
	newest := base.Add(time.Duration(polls*per-1) * 100 * time.Millisecond).UnixMilli()
	if want := newest - 2*time.Minute.Milliseconds(); p.From != want {
		t.Errorf("loaded From %d, want %d", p.From, want)
	}
	if len(p.Seen) != 1201 {
		t.Errorf("loaded %d ids, want the overlap's 1201", len(p.Seen))
	}
}

// TestPositionJournalCutShort: a journal whose last line a crash cut short loads without it;
// a snapshot saved over an old journal (the crash before the journal was emptied) loads as
// the union, pruned.
func TestPositionJournalCutShort(t *testing.T) {
	dir := t.TempDir()
	p := cloudwatch.Position{From: 1000, Seen: map[string]int64{"a": 1000, "b": 1500}}
	if err := cloudwatch.SavePositions(dir, group, cloudwatch.DefaultConfig().StreamPrefix, &p, map[string]int64{"c": 2000}, map[string]int64{"d": 2100}); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "cloudwatch-*.journal"))
	if len(files) != 1 {
		t.Fatalf("journal files %v, want one", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files[0], b[:len(b)-5], 0o640); err != nil { // the last line cut
		t.Fatal(err)
	}
	got, err := cloudwatch.LoadPosition(dir, group, cloudwatch.DefaultConfig().StreamPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Seen["c"]; !ok || len(got.Seen) != 3 {
		t.Errorf("loaded %v, want a, b and c (d's line was cut)", got.Seen)
	}
	if got.From != 1000 {
		t.Errorf("loaded From %d, want 1000", got.From)
	}
}

// TestPositionBound: past the bound the oldest seen ids are forgotten, ties included, and
// exactly as many as are too many.
func TestPositionBound(t *testing.T) {
	p := cloudwatch.Position{Seen: map[string]int64{}}
	for i := range 100 {
		p.Seen[fmt.Sprint(i)] = int64(i / 2) // pairs of equal timestamps
	}
	if n := p.Bound(100); n != 0 || len(p.Seen) != 100 {
		t.Fatalf("within the bound: dropped %d", n)
	}
	if n := p.Bound(61); n != 39 || len(p.Seen) != 61 {
		t.Fatalf("dropped %d, kept %d; want 39 and 61", n, len(p.Seen))
	}
	for id, ts := range p.Seen {
		if ts < 19 {
			t.Errorf("kept %s of time %d, an oldest one", id, ts)
		}
	}
}
