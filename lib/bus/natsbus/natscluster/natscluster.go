// Package natscluster runs a JetStream cluster of nats-server processes on loopback for
// tests: each server a separate process with its own store and ports, which a test can kill
// with SIGKILL and start again on the same store, and ask which server leads a stream. The
// nats-server binary is built once per test binary run from the module graph of the test's
// own module ($NATS_SERVER names a ready one instead). When it cannot be built or the
// cluster does not form, tests skip on a developer machine and fail in CI (lib/enginetest).
package natscluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/auditlens/auditlens/lib/enginetest"
	"github.com/auditlens/auditlens/lib/testkit"
)

// Cluster is a JetStream cluster of nats-server processes owned by one test.
type Cluster struct {
	Name    string
	Servers []*Server
}

// Server is one nats-server process of a Cluster.
type Server struct {
	Name        string
	Dir         string // holds the JetStream store (store/) and the log (server.log)
	ClientPort  int
	ClusterPort int
	MonitorPort int

	bin     string
	cluster string
	routes  []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed once the running process has been reaped
}

// Start starts a cluster of n servers for t (3: a quorum that survives the loss of one), waits until every server is healthy (the
// JetStream meta group has a leader and each server is current), and stops them when t ends.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		enginetest.Unavailable(t, "nats-server", err)
	}
	ports, err := freePorts(3 * n)
	if err != nil {
		enginetest.Unavailable(t, "nats-server", err)
	}
	c := &Cluster{Name: "auditlens-test"}
	for i := range n {
		c.Servers = append(c.Servers, &Server{
			Name:        fmt.Sprintf("n%d", i+1),
			Dir:         t.TempDir(),
			ClientPort:  ports[3*i],
			ClusterPort: ports[3*i+1],
			MonitorPort: ports[3*i+2],
			bin:         bin,
			cluster:     c.Name,
		})
	}
	for _, s := range c.Servers {
		for _, o := range c.Servers {
			if o != s {
				s.routes = append(s.routes, fmt.Sprintf("nats://127.0.0.1:%d", o.ClusterPort))
			}
		}
	}
	t.Cleanup(func() {
		for _, s := range c.Servers {
			s.Stop()
		}
		if t.Failed() {
			for _, s := range c.Servers {
				t.Logf("nats-server %s log (last lines):\n%s", s.Name, s.LogTail(40))
			}
		}
	})
	for _, s := range c.Servers {
		if err := s.Start(); err != nil {
			enginetest.Unavailable(t, "nats-server", err)
		}
	}
	for _, s := range c.Servers {
		if err := s.WaitHealthy(testkit.Bound(60 * time.Second)); err != nil {
			enginetest.Unavailable(t, "nats-server cluster", err)
		}
	}
	return c
}

// URLs is the comma-separated client URL list of every server, as --nats-url takes it.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		urls[i] = s.URL()
	}
	return strings.Join(urls, ",")
}

// Server returns the server called name, or nil.
func (c *Cluster) Server(name string) *Server {
	for _, s := range c.Servers {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// StreamLeader returns the server that leads stream, waiting (until ctx ends) while the
// stream has no leader, as during an election.
func (c *Cluster) StreamLeader(ctx context.Context, stream string) (*Server, error) {
	return c.leader(ctx, stream, stream, func(ctx context.Context, st jetstream.Stream) (*jetstream.ClusterInfo, error) {
		info, err := st.Info(ctx)
		if err != nil {
			return nil, err
		}
		return info.Cluster, nil
	})
}

// ConsumerLeader returns the server that leads the durable consumer of stream.
func (c *Cluster) ConsumerLeader(ctx context.Context, stream, consumer string) (*Server, error) {
	return c.leader(ctx, stream, "consumer "+consumer+" of "+stream, func(ctx context.Context, st jetstream.Stream) (*jetstream.ClusterInfo, error) {
		cons, err := st.Consumer(ctx, consumer)
		if err != nil {
			return nil, err
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return nil, err
		}
		return info.Cluster, nil
	})
}

// leader asks the cluster, through any server, for the leader that info reports of what (a
// stream or one of its consumers), until there is one.
func (c *Cluster) leader(ctx context.Context, stream, what string, info func(context.Context, jetstream.Stream) (*jetstream.ClusterInfo, error)) (*Server, error) {
	nc, err := nats.Connect(c.URLs(), nats.Name("natscluster"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("connect to the cluster: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	var last error
	for {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := js.Stream(qctx, stream)
		var ci *jetstream.ClusterInfo
		if err == nil {
			ci, err = info(qctx, st)
		}
		cancel()
		switch {
		case err != nil:
			last = err
		case ci == nil || ci.Leader == "":
			last = errors.New("no leader")
		case c.Server(ci.Leader) == nil:
			return nil, fmt.Errorf("%s is led by %q, not a server of this cluster", what, ci.Leader)
		default:
			return c.Server(ci.Leader), nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("find the leader of %s: %w (last: %w)", what, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ServerOf returns the running server that holds a client connection named connName (the
// nats.Name option; natsbus.Config.Name), from the servers' /connz monitoring endpoints.
func (c *Cluster) ServerOf(connName string) (*Server, error) {
	for _, s := range c.Servers {
		if !s.Running() {
			continue
		}
		var connz struct {
			Connections []struct {
				Name string `json:"name"`
			} `json:"connections"`
		}
		if err := s.monitor("/connz?limit=10000", &connz); err != nil {
			return nil, err
		}
		for _, cn := range connz.Connections {
			if cn.Name == connName {
				return s, nil
			}
		}
	}
	return nil, fmt.Errorf("no server holds a connection named %q", connName)
}

// URL is the server's client URL.
func (s *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.ClientPort) }

// Running reports whether the server process was started and not stopped or killed since.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Start starts the server process (again, after Kill or Stop, on the same store and ports)
// and waits until its monitoring endpoint answers. That a restarted server has caught up with
// the cluster is WaitHealthy.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	logFile, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open the log of nats-server %s: %w", s.Name, err)
	}
	defer logFile.Close() // the child has its own descriptor
	args := []string{
		"-js", "-sd", filepath.Join(s.Dir, "store"), "-n", s.Name,
		"-a", "127.0.0.1", "-p", strconv.Itoa(s.ClientPort), "-m", strconv.Itoa(s.MonitorPort),
		"--cluster_name", s.cluster,
		"--cluster", fmt.Sprintf("nats://127.0.0.1:%d", s.ClusterPort),
	}
	if len(s.routes) > 0 {
		args = append(args, "--routes", strings.Join(s.routes, ","))
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.Dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Killed with the test binary, whatever happens to it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start nats-server %s: %w", s.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // its exit status says nothing the log does not
		close(exited)
	}()
	wait := testkit.Bound(30 * time.Second)
	deadline := time.Now().Add(wait)
	for {
		err := s.monitor("/varz", nil)
		if err == nil {
			s.cmd, s.exited = cmd, exited
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("nats-server %s did not answer on port %d within %s: %w\n%s", s.Name, s.MonitorPort, wait, err, s.LogTail(20))
		}
		select {
		case <-exited:
			return fmt.Errorf("nats-server %s exited at start:\n%s", s.Name, s.LogTail(20))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// WaitHealthy waits until the server reports itself healthy (/healthz): connected to a
// JetStream meta leader and current with every stream and consumer it hosts.
func (s *Server) WaitHealthy(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := s.monitor("/healthz", nil)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats-server %s not healthy after %s: %w", s.Name, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Kill stops the server with SIGKILL (no flush, no clean shutdown) and waits until the
// process is gone; Start brings it back on the same store.
func (s *Server) Kill() { s.stop(syscall.SIGKILL) }

// Stop stops the server with SIGTERM (SIGKILL after 10s) and waits until the process is
// gone. It is idempotent.
func (s *Server) Stop() { s.stop(syscall.SIGTERM) }

func (s *Server) stop(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd, s.exited = nil, nil
}

func (s *Server) logPath() string { return filepath.Join(s.Dir, "server.log") }

// LogTail returns the last n lines the server logged, over all its runs.
func (s *Server) LogTail(n int) string {
	b, err := os.ReadFile(s.logPath())
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// monitor GETs path from the monitoring endpoint and decodes the JSON answer into v (if
// not nil); a status other than 200 is an error carrying the answer.
func (s *Server) monitor(path string, v any) error {
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d%s", s.MonitorPort, path))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var msg strings.Builder
		_, _ = fmt.Fprintf(&msg, "%s: %s", path, resp.Status)
		var body struct {
			Error string `json:"error"`
		}
		if json.NewDecoder(resp.Body).Decode(&body) == nil && body.Error != "" {
			_, _ = fmt.Fprintf(&msg, ": %s", body.Error)
		}
		return errors.New(msg.String())
	}
	if v == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}

// freePorts is n distinct free loopback ports below the ephemeral range (enginetest).
func freePorts(n int) ([]int, error) { return enginetest.FreePorts(n) }
