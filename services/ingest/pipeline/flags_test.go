package pipeline_test

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/services/ingest/pipeline"
	"github.com/auditlens/auditlens/services/ingest/webhook"
)

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
	file := pipeline.Config{AuditLog: "audit.log"}
	bigger := pipeline.Config{AuditLog: "audit.log", BatchBytes: 32 << 20, Publishers: 4}
	hook := pipeline.Config{Webhook: webhook.Config{Addr: ":8443"}}
	both := pipeline.Config{AuditLog: "audit.log", Webhook: webhook.Config{Addr: ":8443", MaxInflightBytes: 256 << 20}}
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
	managed := pipeline.Config{AuditLog: "audit.log"}
	managed.PubSub.Subscription = "projects/p/subscriptions/audit"
	if got := managed.MemoryLimit(); got != 0 {
		t.Errorf("with a Pub/Sub source, whose memory is not measured: limit %d MiB, want none (0)", got>>20)
	}
}
