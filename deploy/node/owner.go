package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The node's run directory, bridge, ports and pid files are machine-wide: one node at a time.
// The checkout that brought it up is its owner (Run/owner holds its repository's path); another
// checkout's node-up or node-down refuses while that node's processes run, instead of adopting
// them (their images, overlay and audit policy are the other checkout's).

// processes are the node's long-running processes, by the name of their pid files.
var processes = []string{"kubelet", "kube-proxy", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "containerd", "dns", "nats", "clickhouse", "etcd"}

func (n *Node) ownerFile() string { return filepath.Join(n.cfg.Run, "owner") }

// alive lists the node's processes that run.
func (n *Node) alive() []string {
	var live []string
	for _, p := range processes {
		if _, ok := n.running(p); ok {
			live = append(live, p)
		}
	}
	return live
}

// checkOwner refuses action (up, down) while a node of another checkout runs here. Up also
// refuses processes of no known owner (a node-up from before owners were recorded); down then
// clears them.
func (n *Node) checkOwner(action string) error {
	b, err := os.ReadFile(n.ownerFile())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	live := n.alive()
	if len(live) == 0 {
		return nil
	}
	owner := strings.TrimSpace(string(b))
	switch {
	case owner == n.cfg.Repo:
		return nil
	case owner == "" && action == "down":
		return nil
	case owner == "":
		return fmt.Errorf("node %s: a node of no known checkout runs on this machine (%s): run make node-down first", action, strings.Join(live, ", "))
	}
	return fmt.Errorf("node %s: the node of another checkout, %s, runs on this machine (%s): stop it there (make node-down), or here with: node down -repo %s",
		action, owner, strings.Join(live, ", "), owner)
}

// claim records this checkout as the node's owner.
func (n *Node) claim() error {
	if err := os.MkdirAll(n.cfg.Run, 0o755); err != nil {
		return err
	}
	return os.WriteFile(n.ownerFile(), []byte(n.cfg.Repo+"\n"), 0o644)
}
