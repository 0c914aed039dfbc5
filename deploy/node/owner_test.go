package node

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestOwner: while a node's process runs, another checkout's node-up and node-down refuse,
// naming the owner and how to stop it; its own checkout may go on; with no process running
// anyone may start; processes of no known owner may be stopped but not adopted.
func TestOwner(t *testing.T) {
	run := t.TempDir()
	mk := func(repo string) *Node {
		n, err := New(Config{Repo: repo, Root: filepath.Join(t.TempDir(), "root"), Run: run, Self: "/bin/true"})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	a, b := mk("/src/a"), mk("/src/b")
	if err := a.checkOwner("up"); err != nil {
		t.Fatalf("no node: %v", err)
	}
	if err := a.claim(); err != nil {
		t.Fatal(err)
	}
	// Its etcd "runs": this test's own process stands for it.
	if err := os.MkdirAll(filepath.Join(run, "pids"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(a.pidFile("etcd"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, action := range []string{"up", "down"} {
		if err := a.checkOwner(action); err != nil {
			t.Errorf("the owner's node %s: %v", action, err)
		}
		err := b.checkOwner(action)
		if err == nil || !strings.Contains(err.Error(), "the node of another checkout, /src/a, runs on this machine (etcd)") ||
			!strings.Contains(err.Error(), "node down -repo /src/a") {
			t.Errorf("another checkout's node %s: %v", action, err)
		}
	}
	// No owner recorded (a node-up of before): down clears it, up refuses to adopt it.
	if err := os.Remove(a.ownerFile()); err != nil {
		t.Fatal(err)
	}
	if err := b.checkOwner("down"); err != nil {
		t.Errorf("down of an unowned node: %v", err)
	}
	if err := b.checkOwner("up"); err == nil || !strings.Contains(err.Error(), "no known checkout") {
		t.Errorf("up beside an unowned node: %v", err)
	}
	// Nothing runs: anyone may start, whatever the owner file says.
	if err := a.claim(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(a.pidFile("etcd")); err != nil {
		t.Fatal(err)
	}
	if err := b.checkOwner("up"); err != nil {
		t.Errorf("up after the other node stopped: %v", err)
	}
}
