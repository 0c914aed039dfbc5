package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/report/chtest"
)

// Recovery time: after one part of the pipeline is killed with SIGKILL mid-stream and
// restarted at once, ClickHouse must hold the exact count within recoveryBound of the
// restart. The audit log grows while it runs (feed: the input over feedTime, as an apiserver
// writes it), so that the part killed holds work in flight when it dies. The wait itself is bounded by recoveryWait, so that a loaded machine shows a slow
// recovery as a number in the log, not as a hang; the defaults of every binary are used (no
// shortened ack waits or retries): what is measured is what a user gets.
const (
	recoveryBound = 30 * time.Second
	recoveryWait  = 90 * time.Second
	feedTime      = 6 * time.Second
)

// fed is a feed in progress: done is closed when the last line is written, at end.
type fed struct {
	done chan struct{}
	end  time.Time
}

// feed appends the lines of src to dst in 60 steps over feedTime.
func feed(t *testing.T, src, dst string) *fed {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	const steps = 60
	fd := &fed{done: make(chan struct{})}
	go func() {
		defer close(fd.done)
		defer func() { fd.end = time.Now() }()
		defer f.Close()
		tick := time.NewTicker(feedTime / steps)
		defer tick.Stop()
		for i := range steps {
			chunk := lines[i*len(lines)/steps : (i+1)*len(lines)/steps]
			if _, err := f.Write(bytes.Join(chunk, nil)); err != nil {
				t.Errorf("feed: %v", err)
				return
			}
			<-tick.C
		}
	}()
	t.Cleanup(func() { <-fd.done })
	return fd
}

// recoverySetup starts ClickHouse and writes the input all.log (not yet fed to the pipeline)
// with the findings classify scan finds in it.
func recoverySetup(t *testing.T) (ch *chtest.Server, db *sql.DB, all string, events int, want map[string]bool) {
	ch = chtest.StartServer(t)
	all = filepath.Join(t.TempDir(), "all.log")
	events = writeInput(t, all, 120)
	want = expected(t, all).keys
	db, err := sql.Open("clickhouse", ch.DSN("default"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return ch, db, all, events, want
}

func TestRecoveryAfterKill(t *testing.T) {
	ch, db, all, events, want := recoverySetup(t)
	t.Logf("%d events, %d findings expected per run, written over %s", events, len(want), feedTime)

	for _, victim := range []string{"ingest", "classify", "report", "nats", "clickhouse"} {
		t.Run(victim, func(t *testing.T) {
			cluster := "kill-" + victim
			dir := t.TempDir()
			input := filepath.Join(dir, "audit.log")
			fed := feed(t, all, input)
			natsAddr := freeAddr(t)
			nats := start(t, dir, "nats-server", "-js", "-sd", filepath.Join(dir, "nats"), "-a", "127.0.0.1",
				"-p", portOf(t, natsAddr), "--server_name", "recovery")
			testkit.Eventually(t, 30*time.Second, "nats-server listening", func() bool {
				c, err := net.Dial("tcp", natsAddr)
				if err == nil {
					c.Close()
				}
				return err == nil
			})
			common := []string{"--cluster", cluster, "--log-format", "json", "--metrics-addr", "", "--nats-url", "nats://" + natsAddr}
			procs := map[string]*proc{
				"ingest":   start(t, dir, "ingest", append([]string{"--audit-log", input, "--checkpoint-dir", filepath.Join(dir, "cp")}, common...)...),
				"classify": start(t, dir, "classify", common...),
				"report":   start(t, dir, "report", append([]string{"--clickhouse-dsn", ch.DSN("auditlens")}, common...)...),
				"nats":     nats,
			}
			count := func() int { return countStored(t, db, cluster) }
			waitFirst(t, count, len(want))
			// A consumer killed must hold deliveries it has not acknowledged: those are what
			// its recovery time is about (without, any ack wait would pass).
			switch victim {
			case "classify":
				waitHolding(t, natsAddr, "AUDIT_EVENTS", "classify")
			case "report":
				waitHolding(t, natsAddr, "AUDIT_FINDINGS", "report")
			}

			before := count()
			var restarted time.Time
			if victim == "clickhouse" {
				ch.Kill()
				restarted = time.Now()
				if err := ch.Start(); err != nil {
					t.Fatal(err)
				}
			} else {
				p := procs[victim]
				p.kill()
				restarted = time.Now()
				p.start()
			}
			took := waitExact(t, db, cluster, want, restarted)
			t.Logf("%s killed with %d of %d findings stored: exact count %s after its restart (bound %s)%s",
				victim, before, len(want), took.Round(10*time.Millisecond), recoveryBound, afterFeed(fed, restarted, took))
			if took > recoveryBound {
				t.Errorf("%s: exact count %s after the restart, want within %s", victim, took.Round(time.Second), recoveryBound)
			}
		})
	}
}

// TestAllInOneRecoveryAfterKill is the same for the single-process binary on its embedded
// NATS, writing to ClickHouse 18.16 (so that the count can be read while it is down).
func TestAllInOneRecoveryAfterKill(t *testing.T) {
	ch, db, all, events, want := recoverySetup(t)
	const cluster = "kill-auditlens"
	dir := t.TempDir()
	input := filepath.Join(dir, "audit.log")
	fed := feed(t, all, input)
	natsAddr := freeAddr(t)
	p := start(t, dir, "auditlens", "--cluster", cluster, "--log-format", "json", "--metrics-addr", "",
		"--data-root", filepath.Join(dir, "data"), "--audit-log", input, "--clickhouse-dsn", ch.DSN("auditlens"),
		"--nats-embedded-listen", natsAddr)
	count := func() int { return countStored(t, db, cluster) }
	waitFirst(t, count, len(want))
	waitHolding(t, natsAddr, "AUDIT_FINDINGS", "report")
	before := count()
	p.kill()
	restarted := time.Now()
	p.start()
	took := waitExact(t, db, cluster, want, restarted)
	t.Logf("auditlens (%d events) killed with %d of %d findings stored: exact count %s after its restart (bound %s)%s",
		events, before, len(want), took.Round(10*time.Millisecond), recoveryBound, afterFeed(fed, restarted, took))
	if took > recoveryBound {
		t.Errorf("exact count %s after the restart, want within %s", took.Round(time.Second), recoveryBound)
	}
}

// afterFeed says how long after the end of the input's writing the count was exact, when
// the writing ended after the restart.
func afterFeed(f *fed, restarted time.Time, took time.Duration) string {
	<-f.done
	if !f.end.After(restarted) {
		return ""
	}
	return fmt.Sprintf(", %s after the input's last line", restarted.Add(took).Sub(f.end).Round(10*time.Millisecond))
}

// waitHolding waits until the consumer group of stream on the NATS server at addr has
// deliveries handed out and not acknowledged.
func waitHolding(t *testing.T, addr, stream, group string) {
	t.Helper()
	nc, err := nats.Connect("nats://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, err := js.Consumer(ctx, stream, group)
		var info *jetstream.ConsumerInfo
		if err == nil {
			info, err = c.Info(ctx)
		}
		cancel()
		if err == nil && info.NumAckPending > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never held an unacknowledged delivery of %s within 30s (last error %v)", group, stream, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitFirst waits until some but not all findings are stored: the moment to kill.
func waitFirst(t *testing.T, count func() int, total int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		n := count()
		if n > 0 {
			if n >= total {
				t.Fatalf("all %d findings stored before the kill: the input is too small to kill mid-stream", total)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no finding stored within 60s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitExact waits (at most recoveryWait) until the cluster's findings are exactly want,
// counted once, and returns how long after since that was.
func waitExact(t *testing.T, db *sql.DB, cluster string, want map[string]bool, since time.Time) time.Duration {
	t.Helper()
	for {
		var uniq uint64
		err := db.QueryRow("SELECT uniqExact(audit_id, rule_id) FROM auditlens.findings WHERE cluster = ?", cluster).Scan(&uniq)
		if err == nil && int(uniq) == len(want) {
			took := time.Since(since)
			got := storedIn(t, db, cluster)
			for k := range want {
				if !got[k] {
					t.Fatalf("count is exact but finding %q is missing (another is extra)", k)
				}
			}
			return took
		}
		if int(uniq) > len(want) {
			t.Fatalf("%d distinct findings stored, more than the %d classify scan finds", uniq, len(want))
		}
		if time.Since(since) > recoveryWait {
			t.Fatalf("after %s: %d of %d findings stored (err %v)", recoveryWait, uniq, len(want), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func countStored(t *testing.T, db *sql.DB, cluster string) int {
	t.Helper()
	var n uint64
	if err := db.QueryRow("SELECT uniqExact(audit_id, rule_id) FROM auditlens.findings WHERE cluster = ?", cluster).Scan(&n); err != nil {
		return 0 // table not created yet, or the server is down
	}
	return int(n)
}

func portOf(t *testing.T, addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := strconv.Atoi(port); err != nil {
		t.Fatal(err)
	}
	return port
}

// buildNATSServer builds the nats-server binary of the version lib embeds (a module this
// one already depends on) into dir.
func buildNATSServer(dir string) error {
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "nats-server"), "github.com/nats-io/nats-server/v2")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build nats-server: %w", err)
	}
	return nil
}
