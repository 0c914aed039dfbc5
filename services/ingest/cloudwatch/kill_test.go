package cloudwatch_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/ingest/internal/testnats"
)

// TestKill9 kills the ingest process -9 while it reads the log group (pages stored but not
// yet in the saved position are read again after the restart) and restarts it while events
// keep arriving: every event is stored exactly once.
func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the ingest binary")
	}
	bin := filepath.Join(t.TempDir(), "ingest")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/ingest").CombinedOutput(); err != nil {
		t.Fatalf("build ingest: %v\n%s", err, out)
	}
	ev := load(t)
	n := testnats.Start(t)
	f, srv := newFakeLogs(t, group, 10)
	base := time.Now().Add(-40 * time.Minute)
	want := feed(f, ev, 0, 3000, base)
	dir := t.TempDir()
	run := func() *exec.Cmd {
		cmd := exec.Command(bin, "--cloudwatch-log-group", group, "--cloudwatch-endpoint", srv.URL, "--cloudwatch-start", "1h",
			"--cloudwatch-poll-interval", "50ms", "--checkpoint-dir", dir, "--nats-url", n.URL(),
			"--metrics-addr", "", "--log-format", "json")
		cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID=AKIDTESTCLOUDWATCH", "AWS_SECRET_ACCESS_KEY=test-secret", "AWS_REGION=eu-west-1",
			"AWS_CONFIG_FILE="+filepath.Join(dir, "none"), "AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(dir, "none"), "AWS_EC2_METADATA_DISABLED=true")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	cmd := run()
	testkit.Eventually(t, 2*time.Minute, "part of the log group stored", func() bool { return n.Count(t, bus.Events) >= 500 })
	want = append(want, feed(f, ev, 3000, 3500, base)...) // arriving while it runs
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	at := n.Count(t, bus.Events)
	t.Logf("killed after %d of %d events", at, len(want))
	if at >= uint64(len(want)) {
		t.Fatal("everything was stored before the kill; feed more")
	}
	cmd = run()
	want = append(want, feed(f, ev, 3500, 3600, base)...)
	testkit.Eventually(t, 2*time.Minute, "every event after the restart", func() bool { return n.Count(t, bus.Events) >= uint64(len(want)) })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("ingest after SIGTERM: %v", err)
	}
	testnats.CheckExactlyOnce(t, n.Messages(t, bus.Events), want)
}
