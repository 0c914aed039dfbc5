package ingest_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/ingest"
	"github.com/auditlens/auditlens/services/ingest/internal/testbin"
	"github.com/auditlens/auditlens/services/ingest/internal/testlog"
	"github.com/auditlens/auditlens/services/ingest/internal/testnats"
	"github.com/auditlens/auditlens/services/ingest/webhook"
)

var ingestBin string

func TestMain(m *testing.M) { testbin.Main(m, &ingestBin) }

// TestFlags: a wrong flag gets one sentence naming it and exit code 2.
func TestFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "give at least one input: --audit-log, --webhook-addr"},
		{[]string{"--audit-log", dir}, "--audit-log " + dir + " is a directory"},
		{[]string{"--audit-log", filepath.Join(dir, "a.log"), "--start-at", "middle"}, `--start-at "middle"`},
		{[]string{"--webhook-addr", "127.0.0.1:0"}, "--webhook-tls-cert"},
		{[]string{"--cloudwatch-log-group", "/aws/eks/demo/cluster", "--cloudwatch-start", "yesterday"}, `--cloudwatch-start "yesterday"`},
		{[]string{"--cloudwatch-log-group", "/aws/eks/demo/cluster", "--checkpoint-dir", ""}, "--cloudwatch-log-group needs --checkpoint-dir"},
		{[]string{"--webhook-addr", "127.0.0.1:0", "--webhook-tls-cert", "x", "--webhook-tls-key", "y"}, "client authentication"},
		{[]string{"--webhook-addr", "nonsense", "--webhook-tls-cert", "x", "--webhook-tls-key", "y", "--webhook-token-file", "z"}, "--webhook-addr \"nonsense\""},
	} {
		var stderr bytes.Buffer
		cmd := exec.Command(ingestBin, append(tc.args, "--metrics-addr", "")...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("%v: exit %v, want 2", tc.args, err)
		}
		if !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: stderr %q does not say %q", tc.args, stderr.String(), tc.want)
		}
	}
}

// The default soft memory limit leaves room for what each enabled input may hold at once: the
// file input's batches in flight, the webhook's request bodies (so that the webhook does not
// find its in-flight bound above the limit), and no more than that for an input that is off.
func TestMemoryLimitCoversInputs(t *testing.T) {
	root := t.TempDir()
	file := ingest.DefaultConfig(root)
	file.File.Path = "audit.log"
	bigger := ingest.DefaultConfig(root)
	bigger.File.Path, bigger.File.BatchBytes, bigger.File.Publishers = "audit.log", 32<<20, 4
	hook := ingest.DefaultConfig(root)
	hook.Webhook.Addr = ":8443"
	both := ingest.DefaultConfig(root)
	both.File.Path, both.Webhook.Addr, both.Webhook.MaxInflightBytes = "audit.log", ":8443", 256<<20
	if got, atLeast := file.MemoryLimit(), int64(4*(8<<20)); got < atLeast || got > 128<<20 {
		t.Errorf("file input with default batches: limit %d MiB, want between %d and 128 MiB", got>>20, atLeast>>20)
	}
	if got, atLeast := bigger.MemoryLimit(), int64(6*(32<<20)); got < atLeast {
		t.Errorf("4 publishers of 32 MiB batches: limit %d MiB, want at least %d MiB", got>>20, atLeast>>20)
	}
	if got, atLeast := hook.MemoryLimit(), webhook.MemoryPerInflightByte*int64(webhook.DefaultMaxInflightBytes); got < atLeast || got >= atLeast+file.MemoryLimit() {
		t.Errorf("webhook alone: limit %d MiB, want at least its bodies' %d MiB and no room for a file input", got>>20, atLeast>>20)
	}
	if got, atLeast := both.MemoryLimit(), file.MemoryLimit()+webhook.MemoryPerInflightByte*(256<<20); got < atLeast {
		t.Errorf("both inputs: limit %d MiB, want at least %d MiB", got>>20, atLeast>>20)
	}
	// The managed sources get a limit too (there was none): room for the decoded bytes they
	// may hold at once, and for what their clients fetch ahead.
	managed := ingest.DefaultConfig(root)
	managed.File.Path = "audit.log"
	managed.PubSub.Subscription = "projects/p/subscriptions/audit"
	if got, atLeast := managed.MemoryLimit(), file.MemoryLimit()+ingest.ManagedMemoryPerInflightByte*managed.Managed.MaxInflight; got < atLeast {
		t.Errorf("with a Pub/Sub source: limit %d MiB, want at least %d MiB", got>>20, atLeast>>20)
	}
	cw := ingest.DefaultConfig(root)
	cw.CloudWatch.LogGroup = "/aws/eks/demo/cluster"
	if got, atLeast := cw.MemoryLimit(), ingest.ManagedMemoryPerInflightByte*cw.Managed.MaxInflight; got < atLeast || got > 2*atLeast {
		t.Errorf("with the CloudWatch reader: limit %d MiB, want at least %d MiB and not twice that", got>>20, atLeast>>20)
	}
	fh := ingest.DefaultConfig(root)
	fh.Firehose.Addr = ":8444"
	fh.Managed.MaxInflight = 1 << 30
	if got, atLeast := fh.MemoryLimit(), ingest.ManagedMemoryPerInflightByte*int64(1<<30); got < atLeast {
		t.Errorf("Firehose with 1 GiB in flight: limit %d MiB, want at least %d MiB", got>>20, atLeast>>20)
	}
}

// Issue 9: the constructor panicked with a nil metrics registry (a nil *prometheus.Registry
// in the Registerer interface), where classify and report do without metrics.
func TestNewWithoutRegistry(t *testing.T) {
	ev := testlog.Load(t)
	n := testnats.Start(t)
	b := n.Open(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	w := testlog.NewWriter(t, path)
	for i := range 10 {
		line, _ := ev.Event(i)
		if err := w.Line(line); err != nil {
			t.Fatal(err)
		}
	}
	cfg := ingest.DefaultConfig(t.TempDir())
	cfg.File.Path = path
	comps, err := ingest.New(cfg, daemon.Deps{Bus: b, Cluster: "test", Logger: testlog.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.RunStages(ctx, comps, testlog.Logger(t)) }()
	testkit.Eventually(t, 90*time.Second, "the events without metrics", func() bool { return n.Count(t, bus.Events) == 10 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// The flags show and start from DefaultConfig: registering them changes nothing, each
// defaults to its field's value, and parsing sets the field.
func TestFlagsStartFromDefaultConfig(t *testing.T) {
	root := t.TempDir()
	cfg := ingest.DefaultConfig(root)
	fs := flag.NewFlagSet("ingest", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg, ingest.DefaultConfig(root)) {
		t.Errorf("registering and parsing no flag changed the config:\n%+v\nwant\n%+v", cfg, ingest.DefaultConfig(root))
	}
	for name, want := range map[string]string{
		"checkpoint-dir":             filepath.Join(root, "checkpoints"),
		"audit-log-batch-size":       "4096",
		"max-event-size":             "1000000",
		"webhook-max-inflight-bytes": strconv.Itoa(webhook.DefaultMaxInflightBytes),
		"pubsub-max-outstanding":     "1000",
		"kafka-source-group":         "auditlens-ingest",
	} {
		if f := fs.Lookup(name); f == nil || f.DefValue != want {
			t.Errorf("--%s: default %v, want %q", name, f, want)
		}
	}
	if err := fs.Parse([]string{"--audit-log-batch-size", "7", "--webhook-publish-timeout", "3s"}); err != nil {
		t.Fatal(err)
	}
	if cfg.File.BatchSize != 7 || cfg.Webhook.PublishTimeout != 3*time.Second {
		t.Errorf("parsed flags: batch size %d, publish timeout %s; want 7 and 3s", cfg.File.BatchSize, cfg.Webhook.PublishTimeout)
	}
}
