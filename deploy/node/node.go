// Package node brings up and tears down a one-node Kubernetes cluster on this machine from real
// parts (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy,
// containerd, runc, the CNI bridge) with auditlens deployed on it: see docs/node.md.
package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/auditlens/auditlens/deploy/kubetest/kubeapiserver"
)

// The node's fixed addresses. The node's address is on a bridge this package creates, so pods
// reach the host's engines (NATS, ClickHouse, DNS) and the apiserver there; nothing listens on
// the machine's own interfaces.
const (
	Bridge      = "alnode0"
	NodeIP      = "10.244.0.1"
	PodCIDR     = "10.244.0.0/24"
	ServiceCIDR = "10.96.0.0/16"
	// WebhookIP is the ClusterIP of the ingest-webhook Service (fixed in deploy/nodetest's
	// overlay): the apiserver's audit webhook and the receiver's certificate name it.
	WebhookIP = "10.96.0.30"
	NodeName  = "auditlens-node"
	APIPort   = 6443
	// etcd listens on loopback only.
	etcdClientURL = "http://127.0.0.1:12379"
	etcdPeerURL   = "http://127.0.0.1:12380"
)

// Config says where the node keeps its files.
type Config struct {
	// Repo is the repository's root (deploy/audit-policy.yaml, deploy/nodetest, .bin/images).
	Repo string
	// Root holds what is kept between runs: certificates, images, etcd, logs, kubeconfig.
	Root string
	// Run holds what dies with the node: sockets, pids, the kubelet's and containerd's state,
	// the audit log and the ingest checkpoints (the hostPath volumes of the overlay).
	Run string
	// Self is the binary that serves `dns` and `nats` (this program).
	Self string
	// Images are the OCI archives imported into containerd.
	Images []string
	Log    io.Writer
}

// DefaultConfig is the node of the repository at repo.
func DefaultConfig(repo string) Config {
	root := filepath.Join(repo, ".cache", "node")
	if d := os.Getenv("AUDITLENS_CACHE_DIR"); d != "" {
		root = filepath.Join(d, "node")
	}
	var images []string
	for _, name := range []string{"ingest", "classify", "report"} {
		images = append(images, filepath.Join(repo, ".bin", "images", name+".tar"))
	}
	return Config{Repo: repo, Root: root, Run: "/run/auditlens-node", Images: images, Log: os.Stderr}
}

// Validate checks that the paths are set.
func (c Config) Validate() error {
	var errs []error
	for name, v := range map[string]string{"repo": c.Repo, "root": c.Root, "run": c.Run, "self": c.Self} {
		if v == "" || !filepath.IsAbs(v) {
			errs = append(errs, fmt.Errorf("node config: %s %q must be an absolute path", name, v))
		}
	}
	return errors.Join(errs...)
}

// Node is the node of one Config.
type Node struct {
	cfg Config
	bin string // the Kubernetes binaries
	pki *pki
}

// New returns the node of cfg; nothing starts until Up.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	return &Node{cfg: cfg}, nil
}

func (n *Node) logf(format string, args ...any) {
	fmt.Fprintf(n.cfg.Log, "%s node: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// Kubeconfig is the admin kubeconfig node-up writes.
func (n *Node) Kubeconfig() string { return filepath.Join(n.cfg.Root, "kubeconfig") }

// AuditDir is the host directory of the apiserver's audit log.
func (n *Node) AuditDir() string { return filepath.Join(n.cfg.Run, "audit") }

// Up starts every part of the node, deploys auditlens and returns once every pod is Ready.
func (n *Node) Up(ctx context.Context) error {
	start := time.Now()
	if err := n.checkOwner("up"); err != nil {
		return err
	}
	if err := n.claim(); err != nil {
		return err
	}
	for _, d := range []string{n.cfg.Root, n.cfg.Run, n.AuditDir(), filepath.Join(n.cfg.Run, "checkpoints")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	var err error
	if n.pki, err = loadOrCreatePKI(filepath.Join(n.cfg.Root, "pki")); err != nil {
		return err
	}
	steps := []struct {
		name string
		f    func(context.Context) error
	}{
		{"network", n.upNetwork},
		{"etcd", n.upEtcd},
		{"engines", n.upEngines},
		{"containerd", n.upContainerd},
		{"images", n.upImages},
		{"kubernetes binaries", n.buildBinaries},
		{"control plane", n.upControlPlane},
		{"kubelet", n.upKubelet},
		{"auditlens", n.upAuditlens},
	}
	for _, s := range steps {
		t := time.Now()
		if err := s.f(ctx); err != nil {
			return fmt.Errorf("node up: %s: %w", s.name, err)
		}
		n.logf("%s ready in %s", s.name, time.Since(t).Round(100*time.Millisecond))
	}
	n.logf("node up in %s; kubeconfig: %s", time.Since(start).Round(time.Second), n.Kubeconfig())
	return nil
}

// upNetwork creates the bridge that carries the node's address; the CNI bridge plugin attaches
// the pods to it.
func (n *Node) upNetwork(context.Context) error {
	if _, err := net.InterfaceByName(Bridge); err != nil {
		if err := run("ip", "link", "add", Bridge, "type", "bridge"); err != nil {
			return err
		}
	}
	addrs, _ := output("ip", "-o", "-4", "addr", "show", "dev", Bridge)
	if !strings.Contains(addrs, " "+NodeIP+"/") {
		if err := run("ip", "addr", "add", NodeIP+"/24", "dev", Bridge); err != nil {
			return err
		}
	}
	if err := run("ip", "link", "set", Bridge, "up"); err != nil {
		return err
	}
	// Pods reach nothing but the bridge: forwarded traffic from it to any other interface is
	// dropped (no route to the internet from the node's pods).
	if run("iptables", "-C", "FORWARD", "-i", Bridge, "!", "-o", Bridge, "-m", "comment", "--comment", "auditlens-node", "-j", "DROP") != nil {
		if err := run("iptables", "-I", "FORWARD", "-i", Bridge, "!", "-o", Bridge, "-m", "comment", "--comment", "auditlens-node", "-j", "DROP"); err != nil {
			return err
		}
	}
	// Service traffic between two pods of the bridge goes through kube-proxy's rules only if
	// bridged packets pass iptables (br_netfilter). Pods reach the host's engines and the
	// apiserver without it (routed, not bridged), so its absence is logged, not fatal.
	const brnf = "/proc/sys/net/bridge/bridge-nf-call-iptables"
	if !exists(brnf) {
		_ = run("modprobe", "br_netfilter")
	}
	if err := os.WriteFile(brnf, []byte("1"), 0o644); err != nil {
		n.logf("bridge netfilter unavailable (%v): Service traffic from one pod to another on the node may not pass kube-proxy's rules", err)
	}
	return nil
}

func (n *Node) buildBinaries(context.Context) error {
	n.logf("building the Kubernetes binaries (cached in %s)", filepath.Join(kubeapiserver.CacheDir(), "kubernetes"))
	bin, err := kubeapiserver.NodeBinaries()
	n.bin = bin
	return err
}

func (n *Node) upEtcd(ctx context.Context) error {
	etcd, err := lookPath("etcd", "apt-get install etcd-server")
	if err != nil {
		return err
	}
	if err := n.startDetached("etcd", etcd, "--name", "node", "--data-dir", filepath.Join(n.cfg.Root, "etcd"),
		"--listen-client-urls", etcdClientURL, "--advertise-client-urls", etcdClientURL,
		"--listen-peer-urls", etcdPeerURL, "--initial-advertise-peer-urls", etcdPeerURL,
		"--initial-cluster", "node="+etcdPeerURL, "--log-level", "warn"); err != nil {
		return err
	}
	return waitHTTP(ctx, etcdClientURL+"/health", nil, 60*time.Second)
}

func (n *Node) upAuditlens(ctx context.Context) error {
	return n.deploy(ctx)
}

// Down stops every process of the node and removes its mounts, interfaces, iptables rules,
// cgroups and the cluster's data (etcd, NATS, ClickHouse); the certificates, the images and the
// logs in Root stay for the next Up.
func (n *Node) Down() error {
	if err := n.checkOwner("down"); err != nil {
		return err
	}
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if bin, err := kubeapiserver.NodeBinaries(); err == nil { // cached whenever Up ran
		n.bin = bin
	}
	for _, name := range []string{"kubelet", "kube-proxy", "kube-scheduler", "kube-controller-manager", "kube-apiserver"} {
		add(n.stop(name, 5*time.Second))
	}
	add(n.killContainers())
	add(n.stop("containerd", 15*time.Second))
	for _, name := range []string{"dns", "nats", "clickhouse", "etcd"} {
		add(n.stop(name, 15*time.Second))
	}
	add(n.cleanupProxyRules())
	add(cleanupKubeletRules())
	add(unmountUnder(n.cfg.Run, filepath.Join(n.cfg.Root, "containerd")))
	add(removeCgroups("kubepods"))
	if _, err := net.InterfaceByName(Bridge); err == nil {
		add(run("ip", "link", "delete", Bridge))
	}
	for run("iptables", "-C", "FORWARD", "-i", Bridge, "!", "-o", Bridge, "-m", "comment", "--comment", "auditlens-node", "-j", "DROP") == nil {
		if err := run("iptables", "-D", "FORWARD", "-i", Bridge, "!", "-o", Bridge, "-m", "comment", "--comment", "auditlens-node", "-j", "DROP"); err != nil {
			add(err)
			break
		}
	}
	if len(errs) == 0 {
		// The cluster's state goes too: the next node-up is a new cluster, whose node and pod
		// statuses cannot be stale ones read back from etcd.
		for _, d := range []string{"etcd", "nats", "clickhouse"} {
			add(os.RemoveAll(filepath.Join(n.cfg.Root, d)))
		}
		add(os.RemoveAll(n.cfg.Run))
		if err := os.Remove(n.Kubeconfig()); err != nil && !errors.Is(err, os.ErrNotExist) {
			add(err)
		}
	}
	return errors.Join(errs...)
}

// cleanupKubeletRules removes the chains the kubelet adds (KUBE-FIREWALL and its jumps from
// INPUT and OUTPUT, the canaries, the hint), for IPv4 and IPv6.
func cleanupKubeletRules() error {
	var errs []error
	for _, bin := range []string{"iptables", "ip6tables"} {
		if _, err := lookPath(bin, "apt-get install iptables"); err != nil {
			continue
		}
		for _, from := range []string{"INPUT", "OUTPUT"} {
			for run(bin, "-t", "filter", "-C", from, "-j", "KUBE-FIREWALL") == nil {
				if err := run(bin, "-t", "filter", "-D", from, "-j", "KUBE-FIREWALL"); err != nil {
					errs = append(errs, err)
					break
				}
			}
		}
		for _, c := range []struct{ table, chain string }{
			{"filter", "KUBE-FIREWALL"}, {"filter", "KUBE-KUBELET-CANARY"}, {"nat", "KUBE-KUBELET-CANARY"},
			{"mangle", "KUBE-KUBELET-CANARY"}, {"mangle", "KUBE-IPTABLES-HINT"},
		} {
			if run(bin, "-t", c.table, "-S", c.chain) != nil {
				continue // not there
			}
			if err := run(bin, "-t", c.table, "-F", c.chain); err != nil {
				errs = append(errs, err)
				continue
			}
			if err := run(bin, "-t", c.table, "-X", c.chain); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
