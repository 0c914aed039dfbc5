// Package kubeapiserver builds and starts a real kube-apiserver (k8s.io/kubernetes v1.37.2) on
// etcd from the machine (Debian's etcd-server), on loopback ports, for tests: no kubelet and no
// controllers, so objects are stored and admitted (Pod Security included) but nothing runs.
package kubeapiserver

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// The build module's go.mod and go.sum, kept as data (a go.mod file here would make a module
// of this directory): k8s.io/kubernetes with its staging modules replaced by their releases.
var (
	//go:embed kube-apiserver.go.mod.txt
	buildMod []byte
	//go:embed kube-apiserver.go.sum.txt
	buildSum []byte
)

// Version is the Kubernetes release built.
const Version = "v1.37.2"

// CacheDir is where the built binaries are kept between runs and between clones (a build is
// keyed by Version and the embedded go.mod, so any checkout may reuse it, as Go's build cache
// is reused): $AUDITLENS_CACHE_DIR, else the user cache directory's auditlens (beside Go's
// go-build), else the temporary directory's.
func CacheDir() string {
	if d := os.Getenv("AUDITLENS_CACHE_DIR"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "auditlens")
}

// Binary returns the path of a kube-apiserver binary: $AUDITLENS_KUBE_APISERVER if set, else
// the node build's (NodeBinaries) when it is in CacheDir (CI builds only that one, so the
// apiserver is compiled and linked once), else the one built alone from the embedded go.mod
// into CacheDir, building it first if needed (about 7 minutes on two cores with a cold Go build
// cache, seconds with a warm one). Concurrent callers (test packages run in parallel) wait for
// one build.
func Binary() (string, error) {
	if p := os.Getenv("AUDITLENS_KUBE_APISERVER"); p != "" {
		return p, nil
	}
	if dir := cacheDir("kubernetes", linkFlags()); built(dir, NodeCommands) {
		return filepath.Join(dir, "kube-apiserver"), nil
	}
	dir, err := build("kube-apiserver", linkFlags(), "kube-apiserver")
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "kube-apiserver"), nil
}

// NodeCommands are the binaries of a one-node cluster (deploy/node), built together.
var NodeCommands = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl"}

// NodeBinaries returns the directory holding NodeCommands, built from the same embedded go.mod
// as Binary in one `go build` (the packages they share are compiled once) and cached in
// CacheDir()/kubernetes, keyed like the apiserver.
func NodeBinaries() (string, error) {
	return build("kubernetes", linkFlags(), NodeCommands...)
}

// linkFlags stamp the binaries with Version (as Kubernetes' own build does), so /version and the
// node report it and the components' user agents name it (kubelet/v1.37.2, not
// v0.0.0-master), and leave out the symbol table and DWARF (-s -w, as Kubernetes' releases
// do): tests read no debug information, and the six links of a cold build are shorter.
func linkFlags() string {
	var major, minor string
	if parts := strings.SplitN(strings.TrimPrefix(Version, "v"), ".", 3); len(parts) == 3 {
		major, minor = parts[0], parts[1]
	}
	var flags []string
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		flags = append(flags, "-X "+pkg+".gitVersion="+Version, "-X "+pkg+".gitMajor="+major,
			"-X "+pkg+".gitMinor="+minor, "-X "+pkg+".gitTreeState=clean")
	}
	return strings.Join(append([]string{"-s", "-w"}, flags...), " ")
}

// build runs one `go build -ldflags ldflags` of k8s.io/kubernetes/cmd/<cmds> into
// CacheDir()/<cache>/<key> unless every binary is already there; the key hashes the go.mod,
// the go.sum and the flags.
func build(cache, ldflags string, cmds ...string) (string, error) {
	dir := cacheDir(cache, ldflags)
	if built(dir, cmds) {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("build %s: %w", cache, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("build %s: %w", cache, err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("build %s: lock: %w", cache, err)
	}
	if built(dir, cmds) { // built while we waited
		return dir, nil
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), buildMod, 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "go.sum"), buildSum, 0o644); err != nil {
		return "", err
	}
	tmp := filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	args := []string{"build", "-o", tmp + "/"}
	if ldflags != "" {
		args = append(args, "-ldflags", ldflags)
	}
	for _, c := range cmds {
		args = append(args, "k8s.io/kubernetes/cmd/"+c)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s %s: %w\n%s", strings.Join(cmds, " "), Version, err, out)
	}
	for _, c := range cmds {
		if err := os.Rename(filepath.Join(tmp, c), filepath.Join(dir, c)); err != nil {
			return "", err
		}
	}
	return dir, os.Remove(tmp)
}

// cacheDir is the directory of one build in CacheDir: keyed by the go.mod, the go.sum and the
// flags.
func cacheDir(cache, ldflags string) string {
	h := sha256.New()
	h.Write(buildMod)
	h.Write(buildSum)
	if ldflags != "" {
		h.Write([]byte(ldflags))
	}
	return filepath.Join(CacheDir(), cache, Version+"-"+hex.EncodeToString(h.Sum(nil))[:12])
}

// built reports whether dir holds every one of cmds.
func built(dir string, cmds []string) bool {
	for _, c := range cmds {
		if _, err := os.Stat(filepath.Join(dir, c)); err != nil {
			return false
		}
	}
	return true
}
