// Package chtest starts real ClickHouse engines for tests: a clickhouse-server (Debian's
// 18.16 in CI) in a temporary directory on free ports, and the process's embedded chDB
// with one database per test. When an engine cannot start, tests skip on a developer
// machine and fail in CI (lib/enginetest).
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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/auditlens/auditlens/lib/enginetest"
	"github.com/auditlens/auditlens/services/report/rollup"
	"github.com/auditlens/auditlens/services/report/store"
)

// Server is a clickhouse-server process owned by one test.
type Server struct {
	Dir  string
	Port int // native protocol port

	bin string
	// Cluster is the server's place in a cluster (StartCluster), nil for a lone server.
	Cluster *Member
	mu      sync.Mutex
	cmd     *exec.Cmd
	// out is the output of the process of the last Start: a new buffer each time, as the
	// killed process's copying may still write to the one before.
	out *syncBuffer
}

// syncBuffer is a buffer that a process's output goroutine writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// ServerBinary finds clickhouse-server: $CLICKHOUSE_SERVER, PATH, /usr/sbin, /usr/bin.
func ServerBinary() (string, error) {
	if p := os.Getenv("CLICKHOUSE_SERVER"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("clickhouse-server"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/clickhouse-server", "/usr/bin/clickhouse-server"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("clickhouse-server not found (apt-get install clickhouse-server, or set CLICKHOUSE_SERVER)")
}

// StartServer starts a clickhouse-server for t with its own config, data and free port,
// waits until it answers queries, and kills it when t ends.
func StartServer(t testing.TB) *Server {
	t.Helper()
	bin, err := ServerBinary()
	if err != nil {
		enginetest.Unavailable(t, "clickhouse-server", err)
	}
	s := &Server{Dir: t.TempDir(), bin: bin}
	// Its data is the test's: no need for a clean shutdown, which took about 0.75 s a server
	// (there are hundreds in make test).
	t.Cleanup(s.Kill)
	// Another test process may bind the port between the probe and the server's bind, rare
	// below the ephemeral range (enginetest.FreePorts): the server then starts on another.
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			enginetest.Unavailable(t, "clickhouse-server", err)
		}
		s.Port = port
		if err := s.writeConfig(); err != nil {
			t.Fatal(err)
		}
		err = s.Start()
		if err == nil {
			return s
		}
		if attempt == 3 || !strings.Contains(err.Error(), "Address already in use") {
			enginetest.Unavailable(t, "clickhouse-server", err)
		}
		t.Logf("clickhouse-server port %d taken, another: %v", port, err)
	}
}

// Addr is host:port of the native protocol.
func (s *Server) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.Port) }

// DSN is the clickhouse-go DSN of database on s.
func (s *Server) DSN(database string) string {
	return fmt.Sprintf("clickhouse://%s/%s?dial_timeout=2s", s.Addr(), database)
}

// Start starts the server process (again, after Stop, on the same data) and waits until it
// answers a query.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	s.out = &syncBuffer{}
	cmd := exec.Command(s.bin, "--config-file="+filepath.Join(s.Dir, "config.xml"))
	cmd.Dir = s.Dir
	cmd.Stdout = s.out
	cmd.Stderr = s.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := s.ping(); err == nil {
			s.cmd = cmd
			go func() { <-exited }() //nolint:errcheck // reaped here; Stop reports through cmd.Process
			return nil
		} else if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited //nolint:errcheck // killed: its exit status says nothing more
			return fmt.Errorf("clickhouse-server did not answer on %s within 30s: %w\n%s", s.Addr(), err, s.logs())
		}
		select {
		case err := <-exited:
			return fmt.Errorf("clickhouse-server exited: %w\n%s", err, s.logs())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop stops the server (SIGTERM, then SIGKILL after 10s) and waits for it to exit. It is
// idempotent.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	p := s.cmd.Process
	s.cmd = nil
	_ = p.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(10 * time.Second)
	for p.Signal(syscall.Signal(0)) == nil {
		if time.Now().After(deadline) {
			_ = p.Kill()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The port is free once the process is gone; wait for it so a Start right after works.
	for i := 0; i < 250 && s.ping() == nil; i++ {
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill stops the server with SIGKILL (no flush, no clean shutdown) and waits until its port
// is free; Start brings it back on the same data.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	p := s.cmd.Process
	s.cmd = nil
	killAndWait(p)
	for i := 0; i < 250 && s.ping() == nil; i++ {
		time.Sleep(20 * time.Millisecond)
	}
}

// CPU returns the user plus system CPU time the running server process has used so far
// (0 when it is not running or /proc cannot be read): benchmarks report it per row.
func (s *Server) CPU() time.Duration {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// Fields after the command name in parentheses: utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times: 100 on every Linux platform Go supports.
const clockTicks = 100

// ping speaks the native protocol's Hello: connecting is not enough, the server must answer.
func (s *Server) ping() error {
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	// ClientHello: packet 0, client name, version 1.1 revision 54213, database, user, password.
	var b []byte
	b = appendUvarint(b, 0)
	b = appendString(b, "chtest")
	b = appendUvarint(b, 1)
	b = appendUvarint(b, 1)
	b = appendUvarint(b, 54213)
	b = appendString(b, "default")
	b = appendString(b, "default")
	b = appendString(b, "")
	if _, err := c.Write(b); err != nil {
		return err
	}
	one := make([]byte, 1)
	if _, err := c.Read(one); err != nil {
		return err
	}
	if one[0] != 0 { // ServerHello
		return fmt.Errorf("unexpected server packet %d", one[0])
	}
	return nil
}

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendString(b []byte, s string) []byte {
	return append(appendUvarint(b, uint64(len(s))), s...)
}

func (s *Server) logs() string {
	var parts []string
	if s.out != nil {
		if o := s.out.String(); o != "" {
			parts = append(parts, o)
		}
	}
	if b, err := os.ReadFile(filepath.Join(s.Dir, "server.err.log")); err == nil {
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > 20 {
			lines = lines[len(lines)-20:]
		}
		parts = append(parts, strings.Join(lines, "\n"))
	}
	return strings.Join(parts, "\n")
}

func freePort() (int, error) { return enginetest.FreePort() }

var configXML = template.Must(template.New("config").Parse(`<?xml version="1.0"?>
<yandex>
  <logger>
    <level>warning</level>
    <log>{{.Dir}}/server.log</log>
    <errorlog>{{.Dir}}/server.err.log</errorlog>
  </logger>
  <listen_host>127.0.0.1</listen_host>
  <tcp_port>{{.Port}}</tcp_port>
  <path>{{.Dir}}/data/</path>
  <tmp_path>{{.Dir}}/tmp/</tmp_path>
  <user_files_path>{{.Dir}}/user_files/</user_files_path>
  <format_schema_path>{{.Dir}}/format_schemas/</format_schema_path>
  <users_config>{{.Dir}}/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>UTC</timezone>
  <mark_cache_size>268435456</mark_cache_size>
  <max_concurrent_queries>64</max_concurrent_queries>
  <mlock_executable>false</mlock_executable>
{{- with .Cluster}}
  <interserver_http_host>127.0.0.1</interserver_http_host>
  <interserver_http_port>{{.InterserverPort}}</interserver_http_port>
  <zookeeper>
    <node><host>127.0.0.1</host><port>{{.ZooKeeperPort}}</port></node>
    <session_timeout_ms>10000</session_timeout_ms>
  </zookeeper>
  <distributed_ddl><path>/clickhouse/task_queue/ddl</path></distributed_ddl>
  <macros><shard>{{.Shard}}</shard><replica>{{.Replica}}</replica></macros>
  <remote_servers>
    <{{.Name}}>
{{- range .Shards}}
      <shard>
        <internal_replication>true</internal_replication>
{{- range .}}
        <replica><host>127.0.0.1</host><port>{{.}}</port></replica>
{{- end}}
      </shard>
{{- end}}
    </{{.Name}}>
  </remote_servers>
{{- end}}
</yandex>
`))

const usersXML = `<?xml version="1.0"?>
<yandex>
  <profiles>
    <default>
      <max_memory_usage>4000000000</max_memory_usage>
      <allow_experimental_low_cardinality_type>1</allow_experimental_low_cardinality_type>
    </default>
  </profiles>
  <users>
    <default>
      <password></password>
      <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
    </default>
  </users>
  <quotas>
    <default>
      <interval><duration>3600</duration><queries>0</queries><errors>0</errors><result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval>
    </default>
  </quotas>
</yandex>
`

func (s *Server) writeConfig() error {
	var b bytes.Buffer
	if err := configXML.Execute(&b, s); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.Dir, "config.xml"), b.Bytes(), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.Dir, "users.xml"), []byte(usersXML), 0o644)
}

// ServerStore starts a server for t and returns a migrated store on database auditlens.
func ServerStore(t testing.TB) (*Server, *store.Store) {
	t.Helper()
	srv := StartServer(t)
	st := OpenMigrated(t, srv.DSN(store.DefaultDatabase))
	return srv, st
}

// OpenMigrated opens the server store at dsn, migrates it and closes it when t ends.
func OpenMigrated(t testing.TB, dsn string) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := store.OpenServer(dsn)
	if err != nil {
		t.Fatalf("open %s: %v", dsn, err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if _, err := st.Migrate(ctx, store.MigrateOptions{RetentionDays: Retention}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return st
}

// killAndWait sends p SIGKILL and waits until the process is gone.
func killAndWait(p *os.Process) {
	_ = p.Kill()
	for p.Signal(syscall.Signal(0)) == nil {
		time.Sleep(10 * time.Millisecond)
	}
}

// CompactDays compacts the finding days of db's findings as the service does, twice: a
// build counts once it began rollup.Margin after the day's last change, so after data
// generated a moment ago the second round (a margin later) is the one readers take.
// Benchmarks call it after generating their findings.
func CompactDays(tb testing.TB, db *sql.DB) {
	tb.Helper()
	for round := range 2 {
		if round > 0 {
			time.Sleep(rollup.Margin + time.Second)
		}
		t0 := time.Now()
		n, err := rollup.Compact(context.Background(), db, rollup.TablesFor("findings"))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Logf("compacted %d cluster days and %d prefixes in %v", n.Days, n.Prefixes, time.Since(t0).Round(time.Millisecond))
	}
}
