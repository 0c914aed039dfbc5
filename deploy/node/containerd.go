package node

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// PauseImage is the pod sandbox image, built here from cmd/pause (nothing is pulled).
const PauseImage = "auditlens.local/pause:1"

// NofileLimit is containerd's open-file limit, which its containers inherit: below the
// machine's hard limit (20000), which the runtimes' defaults exceed.
const NofileLimit = 16384

func (n *Node) containerdSocket() string { return filepath.Join(n.cfg.Run, "containerd.sock") }

func (n *Node) upContainerd(ctx context.Context) error {
	bin, err := lookPath("containerd", "apt-get install containerd")
	if err != nil {
		return err
	}
	runc, err := lookPath("runc", "apt-get install runc")
	if err != nil {
		return err
	}
	cniBin, err := cniBinDir()
	if err != nil {
		return err
	}
	dir := filepath.Join(n.cfg.Root, "containerd")
	confDir := filepath.Join(n.cfg.Root, "cni", "net.d")
	for _, d := range []string{dir, confDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// The bridge plugin attaches pods to the node's bridge; no masquerading: pods reach the
	// bridge and the node only.
	cni := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "auditlens-node",
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q, "gateway": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, Bridge, filepath.Join(n.cfg.Run, "cni-ipam"), PodCIDR, NodeIP)
	if err := os.WriteFile(filepath.Join(confDir, "10-auditlens-node.conflist"), []byte(cni), 0o644); err != nil {
		return err
	}
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins."io.containerd.internal.v1.opt"]
  path = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  netns_mounts_under_state_dir = true
  # This machine's root lacks CAP_SYS_RESOURCE: runc may not lower oom_score_adj below
  # containerd's (the kubelet asks -998 for sandboxes), so it is clamped to containerd's own.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = %q
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, filepath.Join(dir, "root"), filepath.Join(n.cfg.Run, "containerd"), n.containerdSocket(), n.containerdSocket()+".ttrpc",
		filepath.Join(dir, "opt"), PauseImage, runc, cniBin, confDir)
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o644); err != nil {
		return err
	}
	prlimit, err := lookPath("prlimit", "apt-get install util-linux")
	if err != nil {
		return err
	}
	if err := n.startDetached("containerd", prlimit, fmt.Sprintf("--nofile=%d:%d", NofileLimit, NofileLimit), "--",
		bin, "--config", filepath.Join(dir, "config.toml")); err != nil {
		return err
	}
	return poll(ctx, 60*time.Second, func() error { return n.ctr("version") })
}

// cniBinDir is where Debian's containernetworking-plugins put the plugins (or /opt/cni/bin).
func cniBinDir() (string, error) {
	for _, d := range []string{"/usr/lib/cni", "/opt/cni/bin"} {
		if _, err := os.Stat(filepath.Join(d, "bridge")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("CNI plugins not found in /usr/lib/cni or /opt/cni/bin (apt-get install containernetworking-plugins)")
}

func (n *Node) ctr(args ...string) error {
	return run("ctr", append([]string{"--address", n.containerdSocket(), "--namespace", "k8s.io"}, args...)...)
}

// upImages imports the pause image and auditlens's images into containerd's k8s.io namespace.
func (n *Node) upImages(context.Context) error {
	pause, err := n.pauseArchive()
	if err != nil {
		return err
	}
	for _, archive := range append([]string{pause}, n.cfg.Images...) {
		if _, err := os.Stat(archive); err != nil {
			return fmt.Errorf("image archive %s: %w (make images)", archive, err)
		}
		// --all-platforms: the index is kept whole, so the image's reference keeps the digest
		// `make images` gave it; only the node's platform is unpacked.
		if err := n.ctr("images", "import", "--all-platforms", archive); err != nil {
			return err
		}
	}
	return nil
}

// killContainers kills every container containerd runs for the kubelet (their shims exit with
// them), so containerd can stop and the pods' mounts and network namespaces can go.
func (n *Node) killContainers() error {
	if _, ok := n.running("containerd"); !ok {
		return nil
	}
	out, err := output("ctr", "--address", n.containerdSocket(), "--namespace", "k8s.io", "tasks", "list", "--quiet")
	if err != nil {
		return err
	}
	ids := strings.Fields(out)
	for _, id := range ids {
		_ = n.ctr("tasks", "kill", "--signal", "SIGKILL", id)
	}
	// A killed task stays listed (STOPPED) until deleted; delete each once it has stopped.
	for _, id := range ids {
		_ = poll(context.Background(), 5*time.Second, func() error {
			err := n.ctr("tasks", "delete", "--force", id)
			if err != nil && strings.Contains(err.Error(), "not found") {
				return nil // containerd's CRI deleted it on its exit
			}
			return err
		})
	}
	n.logf("killed %d containers", len(ids))
	return nil
}

// unmountUnder unmounts every mount point below the given directories, deepest first.
func unmountUnder(dirs ...string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := strings.ReplaceAll(fields[4], `\040`, " ")
		for _, d := range dirs {
			if real, err := filepath.EvalSymlinks(d); err == nil {
				d = real
			}
			if strings.HasPrefix(p, d+"/") {
				points = append(points, p)
			}
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []string
	for _, p := range points {
		if out, err := exec.Command("umount", "--lazy", p).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Sprintf("umount %s: %v %s", p, err, out))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// removeCgroups removes the kubelet's cgroup tree (name) from every cgroup v1 hierarchy (or
// the v2 one), once its processes are gone.
func removeCgroups(name string) error {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/" + name)
	if exists("/sys/fs/cgroup/" + name) { // cgroup v2: one hierarchy
		roots = append(roots, "/sys/fs/cgroup/"+name)
	}
	var errs []string
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("remove cgroups: %s", strings.Join(errs, "; "))
	}
	return nil
}
