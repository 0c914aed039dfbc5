// Package nodetest runs auditlens as pods on the one-node cluster of deploy/node (make node-up)
// and checks what only a kubelet shows: findings from this cluster's own apiserver through the
// DaemonSet and the webhook, the console through a port-forward, restarts and rolling updates.
package nodetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/ClickHouse/clickhouse-go/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The node's fixed addresses (deploy/node).
const (
	clickhouseDSN = "clickhouse://127.0.0.1:9000/default"
	cluster       = "node" // AUDITLENS_CLUSTER of the overlay
)

var (
	repo       string
	kubeconfig string
	nodeBin    string
	startedUp  bool
	errSetup   error
)

// TestMain starts the node once for the package (make node-up's program) unless one is already
// up (its kubeconfig answers), and stops it at the end if it started it.
func TestMain(m *testing.M) {
	errSetup = setup()
	code := m.Run()
	if startedUp && os.Getenv("AUDITLENS_NODE_KEEP") == "" {
		cmd := exec.Command(nodeBin, "down", "-repo", repo)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "node down: %v\n", err)
			code = 1
		}
		if left := leftovers(); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "node down left behind: %s\n", strings.Join(left, "; "))
			code = 1
		}
	}
	os.Exit(code)
}

// leftovers lists what the node created that is still there after node down: its bridge,
// mounts below its run directory, the kubelet's and kube-proxy's iptables chains, the
// kubepods cgroups, the run directory itself.
func leftovers() []string {
	var left []string
	if _, err := net.InterfaceByName("alnode0"); err == nil {
		left = append(left, "the bridge alnode0")
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(b), " /run/auditlens-node") {
		left = append(left, "mounts below /run/auditlens-node")
	}
	for _, table := range []string{"filter", "nat", "mangle"} {
		out, _ := exec.Command("iptables", "-t", table, "-S").Output()
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "KUBE-") || strings.Contains(line, "auditlens-node") {
				left = append(left, "iptables -t "+table+": "+line)
			}
		}
	}
	if m, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods"); len(m) > 0 {
		left = append(left, "cgroups "+strings.Join(m, " "))
	}
	if _, err := os.Stat("/run/auditlens-node"); err == nil {
		left = append(left, "/run/auditlens-node")
	}
	return left
}

func setup() error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	repo = filepath.Clean(filepath.Join(wd, "..", ".."))
	kubeconfig = filepath.Join(repo, ".cache", "node", "kubeconfig")
	if d := os.Getenv("AUDITLENS_CACHE_DIR"); d != "" {
		kubeconfig = filepath.Join(d, "node", "kubeconfig")
	}
	if os.Geteuid() != 0 {
		return errors.New("the node needs root (bridges, mounts, cgroups)")
	}
	if c, err := client(); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := c.CoreV1().Nodes().Get(ctx, "auditlens-node", metav1.GetOptions{}); err == nil {
			// A node is up already (make node-up): use it and leave it up, if it is this
			// checkout's (the kubeconfig's directory may be shared: AUDITLENS_CACHE_DIR).
			owner, _ := os.ReadFile("/run/auditlens-node/owner")
			if o := strings.TrimSpace(string(owner)); o != repo {
				return fmt.Errorf("the node up on this machine is the checkout %q's, not this one's (%s): make node-down there", o, repo)
			}
			return nil
		}
	}
	for _, a := range []string{"ingest", "classify", "report"} {
		if _, err := os.Stat(filepath.Join(repo, ".bin", "images", a+".tar")); err != nil {
			return fmt.Errorf("image archive missing: %w (make images)", err)
		}
	}
	nodeBin = filepath.Join(os.TempDir(), fmt.Sprintf("auditlens-node-%d", os.Getpid()))
	build := exec.Command("go", "build", "-o", nodeBin, "./cmd/node")
	build.Dir = filepath.Join(repo, "deploy", "node")
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build deploy/node: %w\n%s", err, out)
	}
	startedUp = true
	up := exec.Command(nodeBin, "up", "-repo", repo)
	up.Stdout, up.Stderr = os.Stderr, os.Stderr
	if err := up.Run(); err != nil {
		return fmt.Errorf("node up: %w", err)
	}
	return nil
}

// need fails (CI) or skips the test when the node could not start.
func need(t *testing.T) {
	t.Helper()
	if errSetup == nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("node unavailable: %v", errSetup)
	}
	t.Skipf("node unavailable: %v", errSetup)
}

func restConfig() (*rest.Config, error) {
	return clientcmd.BuildConfigFromFlags("", kubeconfig)
}

func client() (*kubernetes.Clientset, error) {
	cfg, err := restConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

func mustClient(t *testing.T) *kubernetes.Clientset {
	t.Helper()
	c, err := client()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func clickhouse(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("clickhouse", clickhouseDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond()
		if ok {
			return
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s (last error: %v)", what, timeout, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
