package e2e

import (
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/report/chtest"
)

// Recovery time: after one part of the pipeline is killed with SIGKILL mid-stream and
// restarted at once, ClickHouse must hold the exact count within recoveryBound of the
// restart. The wait itself is bounded by recoveryWait, so that a loaded machine shows a slow
// recovery as a number in the log, not as a hang; the defaults of every binary are used (no
// shortened ack waits or retries): what is measured is what a user gets.
const (
	recoveryBound = 30 * time.Second
	recoveryWait  = 90 * time.Second
)

func TestRecoveryAfterKill(t *testing.T) {
	ch := chtest.StartServer(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "audit.log")
	events := writeInput(t, input, 120)
	want := expected(t, input).keys
	db, err := sql.Open("clickhouse", ch.DSN("default"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	t.Logf("%d events, %d findings expected per run", events, len(want))

	for _, victim := range []string{"ingest", "classify", "report", "nats", "clickhouse"} {
		t.Run(victim, func(t *testing.T) {
			cluster := "kill-" + victim
			dir := t.TempDir()
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
			t.Logf("%s killed with %d of %d findings stored: exact count %s after its restart (bound %s)",
				victim, before, len(want), took.Round(10*time.Millisecond), recoveryBound)
			if took > recoveryBound {
				t.Errorf("%s: exact count %s after the restart, want within %s", victim, took.Round(time.Second), recoveryBound)
			}
		})
	}
}

// TestAllInOneRecoveryAfterKill is the same for the single-process binary on its embedded
// NATS, writing to ClickHouse 18.16 (so that the count can be read while it is down).
func TestAllInOneRecoveryAfterKill(t *testing.T) {
	ch := chtest.StartServer(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "audit.log")
	events := writeInput(t, input, 120)
	want := expected(t, input).keys
	db, err := sql.Open("clickhouse", ch.DSN("default"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const cluster = "kill-auditlens"
	p := start(t, dir, "auditlens", "--cluster", cluster, "--log-format", "json", "--metrics-addr", "",
		"--data-root", filepath.Join(dir, "data"), "--audit-log", input, "--clickhouse-dsn", ch.DSN("auditlens"))
	count := func() int { return countStored(t, db, cluster) }
	waitFirst(t, count, len(want))
	before := count()
	p.kill()
	restarted := time.Now()
	p.start()
	took := waitExact(t, db, cluster, want, restarted)
	t.Logf("auditlens (%d events) killed with %d of %d findings stored: exact count %s after its restart (bound %s)",
		events, before, len(want), took.Round(10*time.Millisecond), recoveryBound)
	if took > recoveryBound {
		t.Errorf("exact count %s after the restart, want within %s", took.Round(time.Second), recoveryBound)
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

func storedIn(t *testing.T, db *sql.DB, cluster string) map[string]bool {
	t.Helper()
	rows, err := db.Query("SELECT DISTINCT audit_id, rule_id FROM auditlens.findings WHERE cluster = ?", cluster)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]bool{}
	for rows.Next() {
		var a, r string
		if err := rows.Scan(&a, &r); err != nil {
			t.Fatal(err)
		}
		got[a+" "+r] = true
	}
	return got
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
