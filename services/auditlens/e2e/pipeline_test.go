// Package e2e runs the three services as separate processes, wired as in production (NATS
// JetStream between them, a real ClickHouse 18.16 server at the end), kills them with SIGKILL
// mid-stream, and checks that ClickHouse counts every finding exactly once: the same set that
// `classify scan` finds offline in the same input.
package e2e

import (
	"bufio"
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/report/chtest"
)

var bin string // directory of the built binaries

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "auditlens-e2e-")
	if err != nil {
		panic(err)
	}
	for _, name := range []string{"ingest", "classify", "report", "auditlens"} {
		// Each binary is built in its own module, as make build does: a module's go.sum
		// holds what its own binary needs (classify's client-go), not another's.
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), "./cmd/"+name)
		cmd.Dir = filepath.Join("..", "..", name)
		cmd.Env = append(os.Environ(), "GOWORK=off")
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n", name, err)
			os.Exit(1)
		}
	}
	if err := buildNATSServer(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// natscluster (TestReplicasShareTheWork) runs the same binary.
	_ = os.Setenv("NATS_SERVER", filepath.Join(dir, "nats-server"))
	bin = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// writeInput multiplies the genuine events of examples/audit.log: copy i of every event gets
// auditID "<id>-<i>", so the input holds copies*168 distinct requests with real shapes.
func writeInput(t testing.TB, path string, copies int) int {
	t.Helper()
	src, err := os.ReadFile("../../../examples/audit.log")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	n := 0
	for i := range copies {
		for _, line := range bytes.Split(bytes.TrimSpace(src), []byte("\n")) {
			var ev map[string]any
			if err := json.Unmarshal(line, &ev); err != nil {
				t.Fatal(err)
			}
			ev["auditID"] = fmt.Sprintf("%v-%d", ev["auditID"], i)
			b, _ := json.Marshal(ev)
			_, _ = w.Write(b) // a failed write shows in w.Flush
			_ = w.WriteByte('\n')
			n++
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return n
}

// scanned is what classify scan found offline.
type scanned struct {
	keys map[string]bool // "audit_id rule_id"
	// inWeek and blocking count the findings with event_time in the week ending 2019-01-06,
	// and of those the ones removed at or before 1.33.
	inWeek, blocking int
}

// expected runs classify scan on the input: the findings the pipeline must store.
func expected(t testing.TB, input string) scanned {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "classify"), "scan", "--format", "json", input)
	var out bytes.Buffer
	cmd.Stdout = &out
	err := cmd.Run()
	// Exit codes 2 and 3 say what was found; 1 (or not running at all) is a failure.
	var ee *exec.ExitError
	if err != nil && (!errors.As(err, &ee) || ee.ExitCode() == 1) {
		t.Fatalf("classify scan: %v", err)
	}
	want := scanned{keys: map[string]bool{}}
	weekStart := time.Date(2018, 12, 31, 0, 0, 0, 0, time.UTC)
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var f struct {
			AuditID   string    `json:"audit_id"`
			RuleID    string    `json:"rule_id"`
			EventTime time.Time `json:"event_time"`
			RemovedIn string    `json:"removed_in"`
		}
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			t.Fatalf("scan output %q: %v", sc.Text(), err)
		}
		want.keys[f.AuditID+" "+f.RuleID] = true
		if !f.EventTime.Before(weekStart) && f.EventTime.Before(weekStart.AddDate(0, 0, 7)) {
			want.inWeek++
			var major, minor int
			if _, err := fmt.Sscanf(f.RemovedIn, "%d.%d", &major, &minor); err == nil && major == 1 && minor <= 33 {
				want.blocking++
			}
		}
	}
	return want
}

type proc struct {
	t    testing.TB
	bin  string // directory of the binary
	name string
	args []string
	env  []string // added to the test's environment
	cmd  *exec.Cmd
	log  *os.File
}

func start(t testing.TB, dir, name string, args ...string) *proc {
	return startFrom(t, bin, dir, name, args...)
}

// startFrom starts binary name of the directory binDir (start: the binaries TestMain built),
// its output in dir/name.log.
func startFrom(t testing.TB, binDir, dir, name string, args ...string) *proc {
	if (name == "report" || name == "auditlens") && !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--report-console-addr") }) {
		// The console's default port is fixed; processes of tests that do not read it serve none.
		args = append(slices.Clip(args), "--report-console-addr=")
	}
	if (name == "report" || name == "auditlens") && !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--retention-days") }) {
		// The inputs are the sample's events of 2017 to 2025, older than any retention: report
		// would not write their findings (TestSampleExpiresWithTheDefaultRetention is about that).
		args = append(slices.Clip(args), "--retention-days=0")
	}
	p := &proc{t: t, bin: binDir, name: name, args: args}
	var err error
	p.log, err = os.OpenFile(filepath.Join(dir, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	p.start()
	t.Cleanup(func() {
		p.kill()
		p.log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(p.log.Name())
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			t.Logf("last lines of %s:\n%s", p.name, strings.Join(lines[max(0, len(lines)-15):], "\n"))
		}
	})
	return p
}

func (p *proc) start() {
	p.cmd = exec.Command(filepath.Join(p.bin, p.name), p.args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if p.env != nil {
		p.cmd.Env = append(os.Environ(), p.env...)
	}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
}

// kill sends SIGKILL: no drain, no flush, no checkpoint written on the way out.
func (p *proc) kill() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		p.cmd = nil
	}
}

// ready says whether the process serving metrics on addr answers 200 on /readyz.
func ready(addr string) bool {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func freeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func stored(t *testing.T, db *sql.DB) map[string]bool { return storedIn(t, db, "e2e") }

// storedIn is the set of "audit_id rule_id" stored for cluster (nil before the table exists).
func storedIn(t *testing.T, db *sql.DB, cluster string) map[string]bool {
	t.Helper()
	rows, err := db.Query("SELECT DISTINCT audit_id, rule_id FROM auditlens.findings WHERE cluster = ?", cluster)
	if err != nil {
		return nil // table not created yet
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

func TestPipelineSurvivesKill9(t *testing.T) {
	ch := chtest.StartServer(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "audit.log")
	events := writeInput(t, input, 60)
	scan := expected(t, input)
	want := scan.keys
	if len(want) < 100 || scan.blocking == 0 {
		t.Fatalf("scan found only %d findings (%d blocking in the week) in %d events", len(want), scan.blocking, events)
	}
	natsAddr := freeAddr(t)
	common := []string{"--cluster", "e2e", "--log-format", "json", "--metrics-addr", ""}
	remote := append([]string{"--nats-url", "nats://" + natsAddr}, common...)

	// ingest owns the embedded JetStream server and exposes it to the other two.
	ingest := start(t, dir, "ingest", append([]string{"--nats-url", "embedded", "--nats-store-dir", filepath.Join(dir, "nats"),
		"--nats-embedded-listen", natsAddr, "--audit-log", input, "--checkpoint-dir", filepath.Join(dir, "cp")}, common...)...)
	testkit.Eventually(t, 30*time.Second, "embedded NATS", func() bool {
		c, err := net.Dial("tcp", natsAddr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	// Deliveries a killed consumer held are redelivered after the ack wait (JetStream does
	// not know the consumer died); shortened here from the production defaults (30s, 5m).
	classify := start(t, dir, "classify", append([]string{"--classify-ack-wait", "3s"}, remote...)...)
	report := start(t, dir, "report", append([]string{"--clickhouse-dsn", ch.DSN("auditlens"), "--report-batch-size", "200",
		"--report-batch-max-wait", "100ms", "--report-ack-wait", "3s"}, remote...)...)

	db, err := sql.Open("clickhouse", ch.DSN("default"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	// Kill each stage mid-stream, once some findings are stored and before all are.
	testkit.Eventually(t, 60*time.Second, "first findings", func() bool { return len(stored(t, db)) > 0 })
	classify.kill()
	report.kill()
	ingest.kill()
	t.Logf("killed all three with %d of %d findings stored", len(stored(t, db)), len(want))
	ingest.start()
	testkit.Eventually(t, 30*time.Second, "embedded NATS after restart", func() bool {
		c, err := net.Dial("tcp", natsAddr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	classify.start()
	report.start()
	testkit.Eventually(t, 120*time.Second, "every finding stored", func() bool {
		return len(stored(t, db)) >= len(want)
	})

	got := stored(t, db)
	var missing, extra []string
	for k := range want {
		if !got[k] {
			missing = append(missing, k)
		}
	}
	for k := range got {
		if !want[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing)+len(extra) > 0 {
		t.Fatalf("stored findings differ from classify scan: missing %d %v, extra %d %v",
			len(missing), head(missing), len(extra), head(extra))
	}
	// Counting by identity is exact whatever was redelivered; raw rows may hold duplicates
	// until ClickHouse merges them.
	var uniq, rows uint64
	if err := db.QueryRow("SELECT uniqExact(cluster, audit_id, rule_id), count() FROM auditlens.findings").Scan(&uniq, &rows); err != nil {
		t.Fatal(err)
	}
	if int(uniq) != len(want) {
		t.Fatalf("uniqExact %d, want %d", uniq, len(want))
	}
	t.Logf("%d events, %d findings counted once (%d raw rows before merges)", events, uniq, rows)

	// The weekly report built from the same store agrees.
	out, err := exec.Command(filepath.Join(bin, "report"), "weekly", "--clickhouse-dsn", ch.DSN("auditlens"), "--cluster", "e2e",
		"--week-ending", "2019-01-06", "--target-version", "1.33", "--format", "json").Output()
	if err != nil {
		t.Fatalf("report weekly: %v", err)
	}
	var rep struct {
		Totals struct {
			Findings, Blocking int
		}
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("weekly json: %v", err)
	}
	if rep.Totals.Findings != scan.inWeek || rep.Totals.Blocking != scan.blocking || !strings.Contains(string(out), "coordination.k8s.io") {
		t.Fatalf("weekly totals %+v, want %d findings, %d blocking (leases API listed)", rep.Totals, scan.inWeek, scan.blocking)
	}
}

func head(s []string) []string {
	if len(s) > 5 {
		return s[:5]
	}
	return s
}
