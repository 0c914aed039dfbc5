package e2e

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/auditlens/auditlens/lib/bus/natsbus/natscluster"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/auditlens/internal/procstat"
	"github.com/auditlens/auditlens/services/report/chtest"
)

// The capacity harness runs the binaries as a fleet would: one ingest per cluster, classify and
// report replicas, on a 3-server JetStream cluster (streams of 3 replicas) and ClickHouse 18.16
// as 2 shards x 2 replicas with ZooKeeper, the schema made by `report migrate
// --clickhouse-cluster`. It only starts binaries and reads what any deployment shows (the
// JetStream consumers' state, the processes' CPU time, ClickHouse), so it measures whatever the
// binaries of the commit do.
var (
	capClusters = flag.Int("capacity.clusters", 50, "BenchmarkCapacity: clusters of the simulated fleet (one ingest each)")
	capEvents   = flag.Int("capacity.events", 1_000_000, "BenchmarkCapacity: events of the fleet run, in all")
	capFindings = flag.Int("capacity.finding-events", 200_000, "BenchmarkCapacity/report: events, each of a request that yields findings")
	capClassify = flag.Int("capacity.classify", 3, "BenchmarkCapacity: classify replicas")
	capReport   = flag.Int("capacity.report", 2, "BenchmarkCapacity: report replicas")
	capWait     = flag.Duration("capacity.report-batch-max-wait", 0, "BenchmarkCapacity: report's --report-batch-max-wait (0: its default)")
)

// fleetRun is the clustered setup with a fleet's logs ready to be fed.
type fleetRun struct {
	tb   testing.TB
	dir  string
	f    *fleet
	nats *natscluster.Cluster
	ch   *chtest.Cluster
	js   jetstream.JetStream
	db   *sql.DB // one ClickHouse server; queries of auditlens.findings span the cluster

	ingest, classify, report []*proc
	busArgs                  []string
	// idle is the CPU each part uses while there is no work, in seconds per second: the
	// engines' background work (merges, replication queues, ZooKeeper sessions, Raft
	// heartbeats), which the stages subtract from what they measure.
	idle map[string]float64
}

// startFleet starts the two clusters of engines, creates the schema and writes the fleet's logs.
func startFleet(tb testing.TB, clusters, events int, m mix) *fleetRun {
	tb.Helper()
	r := &fleetRun{tb: tb, dir: tb.TempDir()}
	began := time.Now()
	r.f = writeFleet(tb, r.dir, clusters, events, m)
	tb.Logf("fleet: %d clusters, %d events, %d findings by classify scan (written and scanned in %s)",
		len(r.f.Clusters), r.f.Events(), r.f.Findings(), time.Since(began).Round(100*time.Millisecond))
	r.nats = natscluster.Start(tb, 3)
	r.ch = chtest.StartCluster(tb, 2, 2)
	r.busArgs = []string{"--nats-url", r.nats.URLs(), "--nats-replicas", "3", "--log-format", "json", "--log-level", "warn"}
	began = time.Now()
	out, err := exec.Command(filepath.Join(bin, "report"), "migrate", "--clickhouse-dsn", r.ch.DSN("auditlens"),
		"--clickhouse-cluster", r.ch.Name, "--retention-days", "0").CombinedOutput()
	if err != nil {
		tb.Fatalf("report migrate --clickhouse-cluster: %v\n%s", err, out)
	}
	tb.Logf("report migrate --clickhouse-cluster %s: %s", r.ch.Name, time.Since(began).Round(100*time.Millisecond))
	nc, err := nats.Connect(r.nats.URLs())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	if r.js, err = jetstream.New(nc); err != nil {
		tb.Fatal(err)
	}
	r.db = r.ch.Servers()[0].DB(tb)
	return r
}

// startIngest starts one ingest per cluster on an empty log (the first alone, so that the
// streams exist before the others start) and waits until every one is ready.
func (r *fleetRun) startIngest() {
	for i, c := range r.f.Clusters {
		log := filepath.Join(r.dir, "input", c+".log")
		if err := os.MkdirAll(filepath.Dir(log), 0o755); err != nil {
			r.tb.Fatal(err)
		}
		if err := os.WriteFile(log, nil, 0o644); err != nil {
			r.tb.Fatal(err)
		}
		r.ingest = append(r.ingest, start(r.tb, r.dir, "ingest", append([]string{"--cluster", c, "--metrics-addr", freeAddr(r.tb),
			"--audit-log", log, "--checkpoint-dir", filepath.Join(r.dir, "cp", c)}, r.busArgs...)...))
		if i == 0 {
			r.ready(r.ingest)
		}
	}
	r.ready(r.ingest)
}

// startClassify and startReport start n replicas each and wait until they are ready.
func (r *fleetRun) startClassify(n int) {
	for range n {
		r.classify = append(r.classify, start(r.tb, r.dir, "classify", append([]string{"--metrics-addr", freeAddr(r.tb)}, r.busArgs...)...))
	}
	r.ready(r.classify)
}

func (r *fleetRun) startReport(n int) {
	for range n {
		args := []string{"--metrics-addr", freeAddr(r.tb), "--report-page=false",
			"--clickhouse-dsn", r.ch.DSN("auditlens"), "--clickhouse-cluster", r.ch.Name, "--retention-days", "0"}
		if *capWait > 0 {
			args = append(args, "--report-batch-max-wait", capWait.String())
		}
		r.report = append(r.report, start(r.tb, r.dir, "report", append(args, r.busArgs...)...))
	}
	r.ready(r.report)
}

// ready waits until every process of ps answers 200 on /readyz while running. One that exited
// (the free port it was given taken meanwhile by another process of the machine, which may
// well answer /readyz too) starts again on another port.
func (r *fleetRun) ready(ps []*proc) {
	r.tb.Helper()
	testkit.Eventually(r.tb, 120*time.Second, "every process ready", func() bool {
		all := true
		for _, p := range ps {
			if procstat.Exited(p.cmd.Process.Pid) {
				p.kill() // reaps it
				p.args[slices.Index(p.args, "--metrics-addr")+1] = freeAddr(r.tb)
				p.start()
				all = false
				continue
			}
			all = all && ready(metricsAddr(p))
		}
		// A process that failed to listen exits at once: look again before trusting a 200.
		time.Sleep(200 * time.Millisecond)
		return all && !slices.ContainsFunc(ps, func(p *proc) bool { return procstat.Exited(p.cmd.Process.Pid) })
	})
}

// alive fails the run at once when a process of the pipeline has exited.
func (r *fleetRun) alive() {
	for _, ps := range [][]*proc{r.ingest, r.classify, r.report} {
		for _, p := range ps {
			if p.cmd != nil && procstat.Exited(p.cmd.Process.Pid) {
				r.tb.Fatalf("%s %v exited (its log is %s)", p.name, p.args, p.log.Name())
			}
		}
	}
}

// feed appends every cluster's generated log to the log its ingest follows, all at once.
func (r *fleetRun) feed() {
	for _, c := range r.f.Clusters {
		src, err := os.Open(r.f.Logs[c])
		if err != nil {
			r.tb.Fatal(err)
		}
		dst, err := os.OpenFile(filepath.Join(r.dir, "input", c+".log"), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			r.tb.Fatal(err)
		}
		_, err = io.Copy(dst, src)
		src.Close()
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			r.tb.Fatal(err)
		}
	}
}

// waitPublished waits until the ingest processes have had every event acknowledged by the bus.
func (r *fleetRun) waitPublished(timeout time.Duration) {
	want := float64(r.f.Events())
	testkit.Eventually(r.tb, timeout, "every event published", func() bool {
		time.Sleep(200 * time.Millisecond)
		r.alive()
		var got float64
		for _, p := range r.ingest {
			m := procstat.Scrape(metricsAddr(p))
			got += m["auditlens_ingest_events_published_total"] + m["auditlens_ingest_bad_lines_total"]
		}
		return got >= want
	})
}

// metricsAddr is the --metrics-addr a process was started with.
func metricsAddr(p *proc) string {
	i := slices.Index(p.args, "--metrics-addr")
	return p.args[i+1]
}

// waitDrained waits until the durable consumer group of stream has delivered and had
// acknowledged everything the stream holds, and returns when its first delivery was seen.
func (r *fleetRun) waitDrained(stream, group string, timeout time.Duration) (first time.Time) {
	testkit.Eventually(r.tb, timeout, group+" drained "+stream, func() bool {
		time.Sleep(100 * time.Millisecond)
		r.alive()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := r.js.Consumer(ctx, stream, group)
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		if err != nil {
			return false
		}
		if info.Delivered.Consumer > 0 && first.IsZero() {
			first = time.Now()
		}
		return !first.IsZero() && info.NumPending == 0 && info.NumAckPending == 0
	})
	return first
}

// waitExact waits (at most timeout) until ClickHouse holds for every cluster exactly as many
// distinct findings as classify scan finds in its log (uniqExact through the Distributed
// table), failing at once when a cluster has more. On a timeout it says which clusters differ
// and what each server holds.
func (r *fleetRun) waitExact(timeout time.Duration) {
	tb := r.tb
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, err := r.counts(r.db, "auditlens.findings")
		exact := err == nil && len(got) == len(r.f.Clusters)
		var differ []string
		for _, c := range r.f.Clusters {
			if got[c] > len(r.f.Want[c]) {
				tb.Fatalf("cluster %s: %d distinct findings stored, classify scan finds %d", c, got[c], len(r.f.Want[c]))
			}
			if got[c] != len(r.f.Want[c]) {
				exact = false
				differ = append(differ, fmt.Sprintf("%s %d of %d", c, got[c], len(r.f.Want[c])))
			}
		}
		if exact {
			return
		}
		if time.Now().After(deadline) {
			var servers []string
			for _, s := range r.ch.Servers() {
				local, err := r.counts(s.DB(tb), "auditlens.findings_local")
				n := 0
				for _, v := range local {
					n += v
				}
				servers = append(servers, fmt.Sprintf("shard %s replica %s: %d (%v)", s.Cluster.Shard, s.Cluster.Replica, n, err))
			}
			tb.Fatalf("after %s, %d clusters differ from classify scan (last error %v): %s; findings_local per server: %s",
				timeout, len(differ), err, strings.Join(head(differ), ", "), strings.Join(servers, "; "))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// counts is the number of distinct findings of each cluster in table, read through db.
func (r *fleetRun) counts(db *sql.DB, table string) (map[string]int, error) {
	rows, err := db.Query("SELECT cluster, uniqExact(audit_id, rule_id) FROM " + table + " GROUP BY cluster")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var c string
		var n uint64
		if err := rows.Scan(&c, &n); err != nil {
			return nil, err
		}
		got[c] = int(n)
	}
	return got, rows.Err()
}

// checkShards checks that both replicas of each shard hold the same finding identities and
// that the shards' union is exactly the fleet's, each identity on one shard. It returns the
// number of findings on each shard.
func (r *fleetRun) checkShards() []int {
	r.tb.Helper()
	var union []string
	var per []int
	for _, s := range r.ch.ShardIdentities(r.tb, "auditlens.findings_local") {
		union = append(union, s...)
		per = append(per, len(s))
	}
	slices.Sort(union)
	if want := r.f.identities(); !slices.Equal(union, want) {
		r.tb.Fatalf("the shards hold %d identities (%d distinct), classify scan finds %d",
			len(union), len(slices.Compact(slices.Clone(union))), len(want))
	}
	return per
}

// cpu is the CPU time used so far by the processes of each part of the setup.
func (r *fleetRun) cpu() map[string]time.Duration {
	out := map[string]time.Duration{}
	add := func(part string, pid int) {
		if d, err := procstat.CPU(pid); err == nil {
			out[part] += d
		}
	}
	for part, ps := range map[string][]*proc{"ingest": r.ingest, "classify": r.classify, "report": r.report} {
		for _, p := range ps {
			if p.cmd != nil {
				add(part, p.cmd.Process.Pid)
			}
		}
	}
	for _, s := range r.nats.Servers {
		for _, pid := range procstat.PIDs(s.Dir) {
			add("nats", pid)
		}
	}
	for _, pid := range procstat.PIDs(r.ch.ZooKeeper.Dir) {
		add("zookeeper", pid)
	}
	for _, s := range r.ch.Servers() {
		out["clickhouse"] += s.CPU()
	}
	return out
}

// measureIdle measures r.idle over d, while nothing is fed.
func (r *fleetRun) measureIdle(d time.Duration) {
	before, began := r.cpu(), time.Now()
	time.Sleep(d)
	r.idle = map[string]float64{}
	for k, v := range r.cpu() {
		r.idle[k] = (v - before[k]).Seconds() / time.Since(began).Seconds()
	}
	r.tb.Logf("idle cpu: %s", formatIdle(r.idle))
}

func formatIdle(idle map[string]float64) string {
	var parts []string
	for k, v := range idle {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", k, 100*v))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// stage is what one part of the pipeline did: how long, and the CPU time each part used
// beyond its idle use.
type stage struct {
	took time.Duration
	cpu  map[string]time.Duration
}

// since is the stage from before (CPU times) and began (wall time) to now.
func (r *fleetRun) since(began time.Time, before map[string]time.Duration) stage {
	s := stage{took: time.Since(began), cpu: r.cpu()}
	for k, v := range before {
		s.cpu[k] -= v
	}
	for k, v := range r.idle {
		s.cpu[k] = max(0, s.cpu[k]-time.Duration(v*float64(s.took)))
	}
	return s
}

// String is "12.3s; cpu classify 20.1s, nats 9.8s, ..." (parts that used a tenth of a second or more).
func (s stage) String() string {
	parts := make([]string, 0, len(s.cpu))
	for k, v := range s.cpu {
		if v >= 100*time.Millisecond {
			parts = append(parts, fmt.Sprintf("%s %s", k, v.Round(100*time.Millisecond)))
		}
	}
	slices.Sort(parts)
	return fmt.Sprintf("%s; cpu %s", s.took.Round(100*time.Millisecond), strings.Join(parts, ", "))
}

// perUnit is the part's CPU time per unit in microseconds.
func (s stage) perUnit(part string, units int) float64 {
	return float64(s.cpu[part].Microseconds()) / float64(max(units, 1))
}

// runStaged runs the parts one after another on the whole input, so that each works at its own
// speed: every ingest publishes its log into the events stream; then the classify replicas
// drain it into the findings stream; then the report replicas drain that into ClickHouse.
func (r *fleetRun) runStaged(classify, report int) (ingest, cl, rp stage) {
	r.startIngest()
	r.measureIdle(5 * time.Second)
	before, began := r.cpu(), time.Now()
	r.feed()
	r.waitPublished(30 * time.Minute)
	ingest = r.since(began, before)

	before = r.cpu()
	r.startClassify(classify)
	began = r.waitDrained("AUDIT_EVENTS", "classify", 30*time.Minute)
	cl = r.since(began, before)

	before = r.cpu()
	r.startReport(report)
	began = r.waitDrained("AUDIT_FINDINGS", "report", 30*time.Minute)
	rp = r.since(began, before)
	return ingest, cl, rp
}

// runTogether runs every part at once, as in production, from the first line fed until every
// event is published, classified and its findings written (the consumers drained: report
// acknowledges after the write), then checks every cluster's count (after measuring the idle
// CPU use for idle, when not 0). Only the bus is polled while the parts work: ClickHouse is
// left to them.
func (r *fleetRun) runTogether(classify, report int, idle, timeout time.Duration) stage {
	r.startIngest()
	r.startClassify(classify)
	r.startReport(report)
	if idle > 0 {
		r.measureIdle(idle)
	}
	before, began := r.cpu(), time.Now()
	r.feed()
	r.waitPublished(timeout)
	r.waitDrained("AUDIT_EVENTS", "classify", timeout)
	r.waitDrained("AUDIT_FINDINGS", "report", timeout)
	all := r.since(began, before)
	r.waitExact(2 * time.Minute)
	return all
}

// The clustered setup counts exactly with replicas of every service: 5 clusters (one ingest
// each) of genuine events, about 50,000 with 1 in 9 yielding findings, through 3 classify and
// 2 report processes running at once, a 3-server JetStream cluster and 2 x 2 ClickHouse
// servers. Every cluster's count is what classify scan finds in its log, and both replicas of
// each shard hold exactly their shard's part. (BenchmarkCapacity is the same at fleet size.)
func TestFleetOnClusters(t *testing.T) {
	r := startFleet(t, 5, 50_000, mix{Plain: 1, Findings: 10})
	all := r.runTogether(3, 2, 0, 3*time.Minute)
	shards := r.checkShards()
	if slices.Contains(shards, 0) {
		t.Fatalf("findings per shard %v: the sharding key left a shard empty", shards)
	}
	t.Logf("%d events, %d findings of %d clusters exact after %s; findings per shard %v",
		r.f.Events(), r.f.Findings(), len(r.f.Clusters), all, shards)
}

// BenchmarkCapacity measures what each part of the clustered setup does on this machine, with
// the binaries of this commit (see the README's capacity table):
//
//   - stages: a fleet of -capacity.clusters clusters and -capacity.events genuine events (about
//     1 in 90 yields a finding), each part run alone on the whole input: the ingest processes
//     publish every log, then -capacity.classify classify replicas drain the events, then
//     -capacity.report report replicas drain the findings into ClickHouse;
//   - report: the same with -capacity.finding-events events that all yield findings: the load
//     on report and on the ClickHouse shards;
//   - together: the fleet run with every part at once, until every cluster's count is exact.
//
// Every run ends with each cluster's count exactly what classify scan finds in its log and the
// shards' replicas identical. Rates are wall-clock on whatever else shares the machine;
// cpu-us/event is each part's CPU time per event, the number that carries to other machines.
//
//	flock /work/bench.lock go test -run '^$' -bench Capacity -benchtime 1x -timeout 2h ./e2e/
func BenchmarkCapacity(b *testing.B) {
	b.Run("stages", func(b *testing.B) {
		for range b.N {
			r := startFleet(b, *capClusters, *capEvents, mix{Plain: 1})
			b.ResetTimer()
			ingest, cl, rp := r.runStaged(*capClassify, *capReport)
			b.StopTimer()
			events, findings := r.f.Events(), r.f.Findings()
			r.waitExact(5 * time.Minute)
			shards := r.checkShards()
			b.Logf("%d clusters, %d events, %d findings; ingest %s; classify x%d %s; report x%d %s; findings per shard %v",
				len(r.f.Clusters), events, findings, ingest, *capClassify, cl, *capReport, rp, shards)
			b.ReportMetric(float64(events)/ingest.took.Seconds(), "ingest-events/s")
			b.ReportMetric(ingest.perUnit("ingest", events), "ingest-cpu-us/event")
			b.ReportMetric(ingest.perUnit("nats", events), "ingest-nats-cpu-us/event")
			b.ReportMetric(float64(events)/cl.took.Seconds(), "classify-events/s")
			b.ReportMetric(cl.perUnit("classify", events), "classify-cpu-us/event")
			b.ReportMetric(cl.perUnit("nats", events), "classify-nats-cpu-us/event")
			b.ReportMetric(float64(findings)/rp.took.Seconds(), "report-findings/s")
		}
	})
	b.Run("report", func(b *testing.B) {
		for range b.N {
			r := startFleet(b, *capClusters, *capFindings, mix{Findings: 1})
			b.ResetTimer()
			_, cl, rp := r.runStaged(*capClassify, *capReport)
			b.StopTimer()
			events, findings := r.f.Events(), r.f.Findings()
			r.waitExact(5 * time.Minute)
			shards := r.checkShards()
			b.Logf("%d clusters, %d events, %d findings; classify x%d %s; report x%d %s; findings per shard %v",
				len(r.f.Clusters), events, findings, *capClassify, cl, *capReport, rp, shards)
			b.ReportMetric(float64(findings)/rp.took.Seconds(), "report-findings/s")
			b.ReportMetric(rp.perUnit("report", findings), "report-cpu-us/finding")
			b.ReportMetric(rp.perUnit("clickhouse", findings), "clickhouse-cpu-us/finding")
			b.ReportMetric(rp.perUnit("nats", findings), "report-nats-cpu-us/finding")
			b.ReportMetric(rp.perUnit("zookeeper", findings), "zookeeper-cpu-us/finding")
			b.ReportMetric(r.reportBatches(), "report-inserts")
			b.ReportMetric(float64(events)/cl.took.Seconds(), "classify-events/s")
			b.ReportMetric(cl.perUnit("classify", events), "classify-cpu-us/event")
		}
	})
	b.Run("together", func(b *testing.B) {
		for range b.N {
			r := startFleet(b, *capClusters, *capEvents, mix{Plain: 1})
			b.ResetTimer()
			all := r.runTogether(*capClassify, *capReport, 5*time.Second, 30*time.Minute)
			b.StopTimer()
			shards := r.checkShards()
			events := r.f.Events()
			b.Logf("%d clusters, %d events, %d findings, exact after %s; findings per shard %v",
				len(r.f.Clusters), events, r.f.Findings(), all, shards)
			b.ReportMetric(float64(events)/all.took.Seconds(), "fleet-events/s")
			for _, part := range []string{"nats", "clickhouse", "zookeeper"} {
				b.ReportMetric(100*r.idle[part], part+"-idle-cpu-%")
			}
			for _, part := range []string{"ingest", "classify", "report", "nats", "clickhouse", "zookeeper"} {
				b.ReportMetric(all.perUnit(part, events), part+"-cpu-us/event")
			}
			// On a trickle of findings, ClickHouse's work is per insert (every replicated
			// block and rollup), not per finding: report's batches say how many there were.
			inserts := r.reportBatches()
			b.ReportMetric(inserts, "report-inserts")
			b.ReportMetric(float64(all.cpu["clickhouse"].Milliseconds())/max(inserts, 1), "clickhouse-cpu-ms/insert")
			// What the engines use once the work is done (background merges, replication).
			r.measureIdle(5 * time.Second)
			b.ReportMetric(100*r.idle["clickhouse"], "clickhouse-after-cpu-%")
		}
	})
}

// reportBatches is the number of ClickHouse inserts the report replicas made (their
// auditlens_report_batches_total; 0 when a binary no longer has that metric).
func (r *fleetRun) reportBatches() float64 {
	var n float64
	for _, p := range r.report {
		n += procstat.Scrape(metricsAddr(p))["auditlens_report_batches_total"]
	}
	return n
}
