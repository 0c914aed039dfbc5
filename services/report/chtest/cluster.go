package chtest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/enginetest"
	"github.com/auditlens/auditlens/services/report/store"
)

// ClusterName is the name of the cluster in the servers' remote_servers.
const ClusterName = "auditlens"

// Member is a server's place in a cluster: what its config says about the cluster.
type Member struct {
	Name            string // the cluster in remote_servers
	Shard, Replica  string // its macros
	InterserverPort int
	ZooKeeperPort   int
	Shards          [][]int // native ports of every server, by shard
}

// Cluster is ZooKeeper and clickhouse-servers on loopback, Shards[i][j] being replica j of
// shard i, each with its own config (zookeeper, remote_servers, macros, distributed_ddl,
// interserver port), owned by one test.
type Cluster struct {
	Name      string
	ZooKeeper *ZooKeeper
	Shards    [][]*Server
}

// StartCluster starts ZooKeeper and shards x replicas clickhouse-servers for t, waits until
// all answer, and stops them when t ends. A missing binary, or one that does not start,
// skips t locally and fails it in CI (lib/enginetest).
func StartCluster(t testing.TB, shards, replicas int) *Cluster {
	t.Helper()
	bin, err := ServerBinary()
	if err != nil {
		enginetest.Unavailable(t, "clickhouse-server", err)
	}
	began := time.Now()
	zk := StartZooKeeper(t)
	c := &Cluster{Name: ClusterName, ZooKeeper: zk}
	ports := make([][]int, shards)
	for i := range ports {
		for range replicas {
			p, err := freePort()
			if err != nil {
				enginetest.Unavailable(t, "clickhouse-server", err)
			}
			ports[i] = append(ports[i], p)
		}
	}
	for i := range shards {
		var row []*Server
		for j := range replicas {
			ip, err := freePort()
			if err != nil {
				enginetest.Unavailable(t, "clickhouse-server", err)
			}
			s := &Server{Dir: t.TempDir(), Port: ports[i][j], bin: bin, Cluster: &Member{
				Name: c.Name, Shard: fmt.Sprintf("%02d", i+1), Replica: fmt.Sprintf("r%d", j+1),
				InterserverPort: ip, ZooKeeperPort: zk.Port, Shards: ports,
			}}
			if err := s.writeConfig(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Kill) // its data is the test's: no need for a clean shutdown
			row = append(row, s)
		}
		c.Shards = append(c.Shards, row)
	}
	// The servers start side by side; each waits until it answers.
	var wg sync.WaitGroup
	errs := make(chan error, shards*replicas)
	for _, s := range c.Servers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Start(); err != nil {
				errs <- fmt.Errorf("shard %s replica %s: %w", s.Cluster.Shard, s.Cluster.Replica, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := errors.Join(collect(errs)...); err != nil {
		enginetest.Unavailable(t, "clickhouse-server", err)
	}
	for _, s := range c.Servers() {
		if err := s.waitZooKeeper(t); err != nil {
			enginetest.Unavailable(t, "clickhouse-server", err)
		}
	}
	t.Logf("zookeeper and %d x %d clickhouse-servers up in %s", shards, replicas, time.Since(began).Round(100*time.Millisecond))
	return c
}

// waitZooKeeper waits until s reads ZooKeeper: a server answers queries before its
// ZooKeeper session is up, and distributed DDL needs it.
func (s *Server) waitZooKeeper(t testing.TB) error {
	db := s.DB(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n uint64
		err := db.QueryRow("SELECT count() FROM system.zookeeper WHERE path = '/'").Scan(&n)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("shard %s replica %s cannot read zookeeper after 30s: %w\n%s", s.Cluster.Shard, s.Cluster.Replica, err, s.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func collect(errs <-chan error) []error {
	var out []error
	for err := range errs {
		out = append(out, err)
	}
	return out
}

// Servers lists every server, shard by shard.
func (c *Cluster) Servers() []*Server {
	var out []*Server
	for _, row := range c.Shards {
		out = append(out, row...)
	}
	return out
}

// DSN is the clickhouse-go DSN of database on every server of c (the client takes the first
// that answers).
func (c *Cluster) DSN(database string) string {
	var addrs []string
	for _, s := range c.Servers() {
		addrs = append(addrs, s.Addr())
	}
	return fmt.Sprintf("clickhouse://%s/%s?dial_timeout=2s", strings.Join(addrs, ","), database)
}

// Store opens a migrated cluster store of database on c, closed when t ends.
func (c *Cluster) Store(t testing.TB, database string) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, err := store.OpenCluster(c.DSN(database), c.Name)
	if err != nil {
		t.Fatalf("open cluster store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	began := time.Now()
	if _, err := st.Migrate(ctx, store.MigrateOptions{RetentionDays: Retention}); err != nil {
		t.Fatalf("migrate cluster store: %v", err)
	}
	t.Logf("schema migrated on the cluster in %s", time.Since(began).Round(100*time.Millisecond))
	return st
}

// ZooKeeper is a standalone ZooKeeper server (Debian's zookeeper package) owned by one test.
type ZooKeeper struct {
	Dir  string
	Port int

	mu  sync.Mutex
	cmd *exec.Cmd
	out bytes.Buffer
}

// ZooKeeperScript finds zkServer.sh: $ZOOKEEPER_SERVER, /usr/share/zookeeper/bin/zkServer.sh.
func ZooKeeperScript() (string, error) {
	if p := os.Getenv("ZOOKEEPER_SERVER"); p != "" {
		return p, nil
	}
	const deb = "/usr/share/zookeeper/bin/zkServer.sh"
	if _, err := os.Stat(deb); err != nil {
		return "", errors.New("zookeeper not found (apt-get install zookeeper, or set ZOOKEEPER_SERVER to zkServer.sh)")
	}
	if _, err := exec.LookPath("java"); err != nil {
		return "", fmt.Errorf("zookeeper needs java: %w", err)
	}
	return deb, nil
}

// StartZooKeeper starts ZooKeeper for t in a temporary directory on a free port, waits until
// it answers, and stops it when t ends.
func StartZooKeeper(t testing.TB) *ZooKeeper {
	t.Helper()
	script, err := ZooKeeperScript()
	if err != nil {
		enginetest.Unavailable(t, "zookeeper", err)
	}
	port, err := freePort()
	if err != nil {
		enginetest.Unavailable(t, "zookeeper", err)
	}
	z := &ZooKeeper{Dir: t.TempDir(), Port: port}
	cfg := fmt.Sprintf("tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir=%s/data\nclientPort=%d\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=ruok\nmaxClientCnxns=0\n", z.Dir, port)
	if err := os.WriteFile(filepath.Join(z.Dir, "zoo.cfg"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(z.Stop)
	if err := z.start(script); err != nil {
		enginetest.Unavailable(t, "zookeeper", err)
	}
	return z
}

func (z *ZooKeeper) start(script string) error {
	z.mu.Lock()
	defer z.mu.Unlock()
	cmd := exec.Command(script, "start-foreground", filepath.Join(z.Dir, "zoo.cfg"))
	cmd.Dir = z.Dir
	cmd.Env = append(os.Environ(), "ZOOCFGDIR="+z.Dir, "ZOO_LOG_DIR="+z.Dir, "JVMFLAGS=-Xmx256m -Xms32m")
	cmd.Stdout = &z.out
	cmd.Stderr = &z.out
	// zkServer.sh execs java, so the process is ZooKeeper itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", script, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := z.ruok()
		if err == nil {
			z.cmd = cmd
			go func() { <-exited }() //nolint:errcheck // reaped here; Stop signals the process
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited //nolint:errcheck // killed: its exit status says nothing more
			return fmt.Errorf("zookeeper did not answer on 127.0.0.1:%d within 30s: %w\n%s", z.Port, err, z.out.String())
		}
		select {
		case err := <-exited:
			return fmt.Errorf("zookeeper exited: %w\n%s", err, z.out.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ruok asks ZooKeeper whether it serves ("imok").
func (z *ZooKeeper) ruok() error {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", z.Port), time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ruok")); err != nil {
		return err
	}
	b := make([]byte, 4)
	n, _ := c.Read(b)
	if string(b[:n]) != "imok" {
		return fmt.Errorf("zookeeper answered %q to ruok", b[:n])
	}
	return nil
}

// Stop kills ZooKeeper (its data is a test's) and waits until it is gone. It is idempotent.
func (z *ZooKeeper) Stop() {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.cmd == nil {
		return
	}
	p := z.cmd.Process
	z.cmd = nil
	killAndWait(p)
}

// DB is a connection to s alone, closed when t ends.
func (s *Server) DB(t testing.TB) *sql.DB {
	t.Helper()
	st, err := store.OpenServer(s.DSN("default"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st.DB()
}

// WaitReplicated waits until the replicas of each shard hold the same active parts of every
// table of database, with nothing left in their replication queues (what a replica missed
// while it was down is fetched), failing t after a minute.
func (c *Cluster) WaitReplicated(t testing.TB, database string) {
	t.Helper()
	for i, shard := range c.Shards {
		dbs := make([]*sql.DB, len(shard))
		for j, s := range shard {
			dbs[j] = s.DB(t)
		}
		deadline := time.Now().Add(time.Minute)
		for {
			same, err := sameParts(dbs, database)
			if err == nil && same {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("shard %d: replicas still differ after a minute (%v)", i+1, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// sameParts reports whether every db holds the same active parts of database's tables and
// has an empty replication queue.
func sameParts(dbs []*sql.DB, database string) (bool, error) {
	var first []string
	for k, db := range dbs {
		var queued uint64
		if err := db.QueryRow("SELECT toUInt64(sum(queue_size)) FROM system.replicas WHERE database = ?", database).Scan(&queued); err != nil {
			return false, err
		}
		if queued > 0 {
			return false, nil
		}
		rows, err := db.Query("SELECT concat(table, '/', name) AS p FROM system.parts WHERE database = ? AND active ORDER BY p", database)
		if err != nil {
			return false, err
		}
		var parts []string
		for rows.Next() {
			var p string
			if err := rows.Scan(&p); err != nil {
				_ = rows.Close()
				return false, err
			}
			parts = append(parts, p)
		}
		_ = rows.Close()
		if k == 0 {
			first = parts
		} else if !slices.Equal(parts, first) {
			return false, nil
		}
	}
	return true, nil
}

// ShardIdentities returns, per shard, the finding identities (cluster/audit_id/rule_id,
// sorted) that its replicas hold in table (database.name of a local table), once every
// replica of the shard holds the same ones; it fails t when they still differ after a
// minute (replication did not catch up).
func (c *Cluster) ShardIdentities(t testing.TB, table string) [][]string {
	t.Helper()
	var out [][]string
	for i, shard := range c.Shards {
		dbs := make([]*sql.DB, len(shard))
		for j, s := range shard {
			dbs[j] = s.DB(t)
		}
		deadline := time.Now().Add(time.Minute)
		for {
			var reps [][]string
			for _, db := range dbs {
				ids, err := identities(db, table)
				if err != nil {
					t.Fatalf("shard %d: %v", i+1, err)
				}
				reps = append(reps, ids)
			}
			same := true
			for _, r := range reps[1:] {
				same = same && slices.Equal(r, reps[0])
			}
			if same {
				out = append(out, reps[0])
				break
			}
			if time.Now().After(deadline) {
				var sizes []int
				for _, r := range reps {
					sizes = append(sizes, len(r))
				}
				t.Fatalf("shard %d: replicas still hold different findings after a minute (%v identities)", i+1, sizes)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return out
}

func identities(db *sql.DB, table string) ([]string, error) {
	rows, err := db.Query("SELECT DISTINCT concat(cluster, '/', audit_id, '/', rule_id) AS id FROM " + table + " ORDER BY id")
	if err != nil {
		return nil, fmt.Errorf("read identities in %s: %w", table, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, fmt.Errorf("read identities in %s: %w", table, err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
