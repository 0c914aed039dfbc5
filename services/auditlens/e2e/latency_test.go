package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/ingest/tail"
	"github.com/auditlens/auditlens/services/report/chtest"
)

// Latency: events written at latencyRate into an audit log that rotates as the apiserver's
// does, for latencyRun; for every event with a finding, the time from its write to its row
// being visible in ClickHouse.
const (
	latencyRate   = 5000 // events per second
	latencyRun    = 20 * time.Second
	latencyTick   = 10 * time.Millisecond // the writer writes latencyRate/100 events per tick
	latencyRotate = 16 << 20              // bytes after which the log is rotated (~3 s at 5k/s)
	latencyPoll   = 25 * time.Millisecond // how often ClickHouse is asked for new rows
)

// BenchmarkLatency writes real audit events (examples/audit.log, each with a new audit id
// and the time of its writing as its timestamps) at 5,000 events/s for 20 s into a log that
// is renamed to audit-<time>.log and replaced every 16 MB, as the apiserver's
// --audit-log-maxsize does, and watches ClickHouse for the findings' rows. It reports the
// write -> row latency of the events with findings (p50, p99, max, in ms; the watch polls
// every 25 ms, so each is up to 25 ms late), once for the all-in-one (embedded NATS, writing
// to the ClickHouse server so the rows can be watched) and once for ingest, classify and
// report as processes over a NATS server. Every binary runs with its defaults; the processes
// inherit the environment, so another setting is tried with its env twin
// (AUDITLENS_REPORT_BATCH_MAX_WAIT=1s). It fails only when a finding never arrives.
//
//	flock /work/bench.lock go test -run '^$' -bench Latency -benchtime 1x ./e2e/
func BenchmarkLatency(b *testing.B) {
	ch := chtest.StartServer(b)
	db, err := sql.Open("clickhouse", ch.DSN("default"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	tmpl, finds := latencyTemplates(b)
	for _, shape := range []string{"all-in-one", "services"} {
		b.Run("shape="+shape, func(b *testing.B) {
			for i := range b.N {
				dir := filepath.Join(b.TempDir(), fmt.Sprint(i))
				cluster := fmt.Sprintf("latency-%s-%d-%d", shape, i, time.Now().UnixNano())
				lat := measureLatency(b, db, dir, cluster, shape, ch.DSN("auditlens"), tmpl, finds)
				b.ReportMetric(float64(lat.p50.Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lat.p99.Microseconds())/1000, "p99-ms")
				b.ReportMetric(float64(lat.max.Microseconds())/1000, "max-ms")
				b.ReportMetric(lat.rate, "written-events/s")
				b.ReportMetric(float64(lat.n), "findings-events")
			}
		})
	}
}

type latencies struct {
	p50, p99, max time.Duration
	n             int     // events with findings measured
	rate          float64 // events per second the writer achieved
}

// latencyTemplates returns the genuine events of examples/audit.log as maps, and for each
// whether classify scan finds something in it.
func latencyTemplates(b *testing.B) ([]map[string]any, []bool) {
	src := "../../../examples/audit.log"
	withFindings := map[string]bool{}
	for k := range expected(b, src).keys {
		withFindings[strings.Fields(k)[0]] = true
	}
	data, err := os.ReadFile(src)
	if err != nil {
		b.Fatal(err)
	}
	var tmpl []map[string]any
	var finds []bool
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var ev map[string]any
		if err := json.Unmarshal(line, &ev); err != nil {
			b.Fatal(err)
		}
		tmpl = append(tmpl, ev)
		finds = append(finds, withFindings[fmt.Sprint(ev["auditID"])])
	}
	return tmpl, finds
}

// measureLatency starts the pipeline of shape for cluster, writes at latencyRate for
// latencyRun, and waits for every finding's row.
func measureLatency(b *testing.B, db *sql.DB, dir, cluster, shape, dsn string, tmpl []map[string]any, finds []bool) latencies {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	log := filepath.Join(dir, "audit.log")
	if err := os.WriteFile(log, nil, 0o644); err != nil {
		b.Fatal(err)
	}
	common := []string{"--cluster", cluster, "--log-format", "json", "--log-level", "warn"}
	var addrs []string
	switch shape {
	case "all-in-one":
		addr := freeAddr(b)
		addrs = append(addrs, addr)
		start(b, dir, "auditlens", append(common, "--metrics-addr", addr, "--data-root", filepath.Join(dir, "data"),
			"--audit-log", log, "--clickhouse-dsn", dsn)...)
	case "services":
		natsAddr := freeAddr(b)
		srv, err := natsbus.StartServer(filepath.Join(dir, "nats"), natsAddr)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(srv.Shutdown)
		common = append(common, "--nats-url", "nats://"+natsAddr)
		for _, svc := range []struct {
			name string
			args []string
		}{
			{"ingest", []string{"--audit-log", log, "--checkpoint-dir", filepath.Join(dir, "cp")}},
			{"classify", nil},
			{"report", []string{"--clickhouse-dsn", dsn}},
		} {
			addr := freeAddr(b)
			addrs = append(addrs, addr)
			start(b, dir, svc.name, append(append([]string{"--metrics-addr", addr}, common...), svc.args...)...)
		}
	}
	for _, addr := range addrs {
		testkit.Eventually(b, time.Minute, addr+" ready", func() bool { return ready(addr) })
	}

	w := &latencyWatch{written: map[string]time.Time{}, seen: map[string]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watched := make(chan error, 1)
	go func() { watched <- w.watch(ctx, db, cluster) }()
	rate := w.write(b, log, tmpl, finds)
	testkit.Eventually(b, 2*time.Minute, "every finding's row", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.seen) >= len(w.written)
	})
	cancel()
	if err := <-watched; err != nil {
		b.Fatal(err)
	}
	return w.latencies(rate)
}

// latencyWatch holds the write time of every event with a finding and the time its row was
// first seen.
type latencyWatch struct {
	mu      sync.Mutex
	written map[string]time.Time // audit id -> written at
	seen    map[string]time.Time // audit id -> row first seen at
	oldest  time.Time            // write time of the oldest event not yet seen
}

// write appends events at latencyRate for latencyRun, rotating the log every latencyRotate
// bytes, and returns the rate achieved.
func (w *latencyWatch) write(b *testing.B, log string, tmpl []map[string]any, finds []bool) float64 {
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { f.Close() }()
	perTick := latencyRate * int(latencyTick) / int(time.Second)
	tick := time.NewTicker(latencyTick)
	defer tick.Stop()
	began := time.Now()
	n, size := 0, 0
	var buf bytes.Buffer
	for time.Since(began) < latencyRun {
		<-tick.C
		buf.Reset()
		now := time.Now().UTC()
		stamp := now.Format(time.RFC3339Nano)
		var ids []string
		for range perTick {
			i := n % len(tmpl)
			ev := tmpl[i]
			id := fmt.Sprintf("latency-%08d", n)
			ev["auditID"], ev["requestReceivedTimestamp"], ev["stageTimestamp"] = id, stamp, stamp
			line, err := json.Marshal(ev)
			if err != nil {
				b.Fatal(err)
			}
			buf.Write(line)
			buf.WriteByte('\n')
			if finds[i] {
				ids = append(ids, id)
			}
			n++
		}
		w.mu.Lock()
		for _, id := range ids {
			w.written[id] = now
		}
		if w.oldest.IsZero() {
			w.oldest = now
		}
		w.mu.Unlock()
		if _, err := f.Write(buf.Bytes()); err != nil {
			b.Fatal(err)
		}
		if size += buf.Len(); size >= latencyRotate {
			// As the apiserver (lumberjack) rotates: rename, then a new file at the path.
			f.Close()
			rotated := strings.TrimSuffix(log, ".log") + "-" + time.Now().UTC().Format(tail.RotationTimeFormat) + ".log"
			if err := os.Rename(log, rotated); err != nil {
				b.Fatal(err)
			}
			if f, err = os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
				b.Fatal(err)
			}
			size = 0
		}
	}
	return float64(n) / time.Since(began).Seconds()
}

// watch polls ClickHouse for the rows of cluster until ctx ends, recording when each audit
// id is first seen. Only rows whose event time is at most two seconds older than the
// oldest event not yet seen are read.
func (w *latencyWatch) watch(ctx context.Context, db *sql.DB, cluster string) error {
	tick := time.NewTicker(latencyPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		w.mu.Lock()
		since := w.oldest
		w.mu.Unlock()
		if since.IsZero() {
			continue
		}
		rows, err := db.QueryContext(ctx, "SELECT DISTINCT audit_id FROM auditlens.findings WHERE cluster = ? AND event_time >= ?",
			cluster, since.Add(-2*time.Second).Truncate(time.Second))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			continue // the table is created by report at its start
		}
		now := time.Now()
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return fmt.Errorf("read rows: %w", err)
			}
			ids = append(ids, id)
		}
		rows.Close()
		w.mu.Lock()
		for _, id := range ids {
			if _, ok := w.seen[id]; !ok {
				w.seen[id] = now
			}
		}
		w.oldest = time.Time{}
		for id, at := range w.written {
			if _, ok := w.seen[id]; !ok && (w.oldest.IsZero() || at.Before(w.oldest)) {
				w.oldest = at
			}
		}
		if w.oldest.IsZero() {
			w.oldest = now // everything so far seen: newer rows only
		}
		w.mu.Unlock()
	}
}

func (w *latencyWatch) latencies(rate float64) latencies {
	w.mu.Lock()
	defer w.mu.Unlock()
	var d []time.Duration
	for id, at := range w.written {
		d = append(d, w.seen[id].Sub(at))
	}
	slices.Sort(d)
	q := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
	return latencies{p50: q(0.50), p99: q(0.99), max: d[len(d)-1], n: len(d), rate: rate}
}
