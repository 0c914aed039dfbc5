package e2e

// The images of `make images` (.bin/images, built once before the tests) run in a real
// container runtime: podman with runc (crun refuses the hybrid cgroup layout of these
// machines; their default ulimits exceed the machine's), on the host's network.

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"database/sql"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/enginetest"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/report/chdb"
	"github.com/auditlens/auditlens/services/report/chtest"
)

const imagesDir = "../../../.bin/images"

// podmanRun is the start of every container's command line.
var podmanRun = []string{"--runtime", "runc", "run", "--rm", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", "--network", "host"}

var (
	loadMu sync.Mutex
	loaded = map[string]string{} // archive -> image reference
)

// image loads .bin/images/<name>.tar into podman once and returns its reference; without
// podman, runc or the archive it skips (fails in CI).
func image(t *testing.T, name string) string {
	t.Helper()
	for _, tool := range []string{"podman", "runc"} {
		if _, err := exec.LookPath(tool); err != nil {
			enginetest.Unavailable(t, "podman with runc", err)
		}
	}
	archive, err := filepath.Abs(filepath.Join(imagesDir, name+".tar"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(archive); err != nil {
		enginetest.Unavailable(t, "the images of make images", err)
	}
	loadMu.Lock()
	defer loadMu.Unlock()
	if ref := loaded[archive]; ref != "" {
		return ref
	}
	out, err := exec.Command("podman", "load", "-q", "-i", archive).CombinedOutput()
	if err != nil {
		t.Fatalf("podman load %s: %v\n%s", archive, err, out)
	}
	m := regexp.MustCompile(`Loaded image(?:\(s\))?: (\S+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("podman load %s said %q", archive, out)
	}
	loaded[archive] = string(m[1])
	return loaded[archive]
}

func version(t *testing.T) string {
	b, err := os.ReadFile("../../../deploy/VERSION")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestImagesVersion: every image runs its binary, which names deploy/VERSION.
func TestImagesVersion(t *testing.T) {
	v := version(t)
	for _, name := range []string{"ingest", "classify", "report", "auditlens"} {
		ref := image(t, name)
		if want := "/" + name + ":" + v; !strings.HasSuffix(ref, want) || !strings.Contains(ref, ".") {
			t.Errorf("%s is named %s: want a fully qualified <registry>%s", name, ref, want)
		}
		out, err := exec.Command("podman", append(podmanRun, ref, "--version")...).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), name+" "+v+"\ncommit: ") || !strings.Contains(string(out), "linux/amd64") {
			t.Errorf("podman run %s --version: %v\n%s", ref, err, out)
		}
	}
}

// container runs ref in the background with its output in dir/<name>.log; it is removed at
// the end of the test.
func container(t *testing.T, dir, name, ref string, podmanArgs []string, args ...string) (logPath string, stop func()) {
	t.Helper()
	cname := fmt.Sprintf("auditlens-test-%s-%d", name, time.Now().UnixNano())
	logPath = filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	argv := append(append(append(append([]string{}, podmanRun...), "--name", cname), podmanArgs...), ref)
	cmd := exec.Command("podman", append(argv, args...)...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			if out, err := exec.Command("podman", "stop", "-t", "60", cname).CombinedOutput(); err != nil {
				t.Logf("podman stop %s: %v %s", cname, err, out)
			}
			_ = cmd.Wait()
			f.Close()
		})
	}
	t.Cleanup(func() {
		stop()
		_ = exec.Command("podman", "rm", "-f", cname).Run()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			t.Logf("last lines of the %s container:\n%s", name, strings.Join(lines[max(0, len(lines)-20):], "\n"))
		}
	})
	return logPath, stop
}

// metric reads one unlabelled sample of the Prometheus text at http://addr/metrics (-1: none).
func metric(addr, name string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// TestAllInOneImage runs the all-in-one image alone, as the README says, on the genuine events
// of examples/audit.log mounted read-only and a data volume: it says it is ready, and the
// findings it stored in its embedded ClickHouse are those of classify scan on the same file.
func TestAllInOneImage(t *testing.T) {
	ref := image(t, "auditlens")
	dir := t.TempDir()
	logs, data := filepath.Join(dir, "logs"), filepath.Join(dir, "data")
	for _, d := range []string{logs, data} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src, err := os.ReadFile("../../../examples/audit.log")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(logs, "audit.log"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(data, 65532, 65532); err != nil {
		t.Fatalf("give the volume to the image's user: %v", err)
	}
	want := expected(t, filepath.Join(logs, "audit.log")).keys
	addr, consoleAddr := freeAddr(t), freeAddr(t)
	logPath, stop := container(t, dir, "auditlens", ref,
		[]string{"-v", logs + ":/logs:ro", "-v", data + ":/data", "-e", "AUDITLENS_METRICS_ADDR=" + addr,
			"-e", "AUDITLENS_REPORT_CONSOLE_ADDR=" + consoleAddr},
		"--audit-log", "/logs/audit.log", "--retention-days", "0", "--log-format", "json")
	var url string
	testkit.Eventually(t, 120*time.Second, "the all-in-one container ready", func() bool {
		url = readyURL(t, logPath)
		return url != ""
	})
	testkit.Eventually(t, 120*time.Second, fmt.Sprintf("%d findings written", len(want)), func() bool {
		return metric(addr, "auditlens_report_findings_written_total") >= float64(len(want))
	})
	// The console the log points to answers a loopback client (the host's network).
	if !strings.Contains(url, consoleAddr) {
		t.Errorf("the ready line points to %s, want the console's %s", url, consoleAddr)
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// Its blockers: the sample's kubelets out of the version-skew policy (1.14 for 1.21, the release
	// after the cluster's once a heartbeat named it; 1.19 for the catalogue's newest before).
	if resp.StatusCode != http.StatusOK || !bytes.Contains(page, []byte("version-skew")) {
		t.Errorf("GET %s: %d, want the first screen naming the sample's blocker: %.300s", url, resp.StatusCode, page)
	}
	stop()
	b, _ := os.ReadFile(logPath)
	saidRoot := false
	for _, line := range bytes.Split(b, []byte("\n")) {
		var l struct {
			Msg      string
			DataRoot string `json:"data_root"`
		}
		if json.Unmarshal(line, &l) == nil && l.Msg == "data root" && l.DataRoot == "/data" {
			saidRoot = true
		}
	}
	if !saidRoot {
		t.Errorf("the log does not say the data root is the volume /data")
	}
	// The volume holds what it stored: open it once the container has stopped.
	if err := chdb.Available(); err != nil {
		enginetest.Unavailable(t, "chdb", err)
	}
	st, err := chdb.Open(context.Background(), filepath.Join(data, "chdb"), "auditlens")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got := keysIn(t, st.DB(), "default")
	var missing, extra []string
	for k := range want {
		if !got[k] {
			missing = append(missing, k)
		}
	}
	for k := range got {
		if !want[k] {
			extra = append(extra, k)
		}
	}
	if len(missing)+len(extra) > 0 || len(want) == 0 {
		t.Fatalf("the all-in-one image stored %d findings, classify scan found %d: missing %v, extra %v", len(got), len(want), head(missing), head(extra))
	}
	t.Logf("the all-in-one image stored the %d findings of classify scan", len(got))
}

func keysIn(t *testing.T, db *sql.DB, cluster string) map[string]bool {
	t.Helper()
	rows, err := db.Query("SELECT DISTINCT audit_id, rule_id FROM auditlens.findings WHERE cluster = '" + cluster + "'")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]bool{}
	for rows.Next() {
		var a, r string
		if err := rows.Scan(&a, &r); err != nil {
			t.Fatal(err)
		}
		got[a+" "+r] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestServiceImages runs the ingest, classify and report images as three containers against
// a nats-server and a ClickHouse 18.16 server on the host: ClickHouse holds exactly the
// findings of classify scan, each once.
func TestServiceImages(t *testing.T) {
	refs := map[string]string{}
	for _, name := range []string{"ingest", "classify", "report"} {
		refs[name] = image(t, name)
	}
	ch := chtest.StartServer(t)
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	if err := os.Mkdir(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	events := writeInput(t, filepath.Join(logs, "audit.log"), 5)
	want := expected(t, filepath.Join(logs, "audit.log")).keys
	natsAddr := freeAddr(t)
	start(t, dir, "nats-server", "-js", "-sd", filepath.Join(dir, "nats"), "-a", "127.0.0.1", "-p", portOf(t, natsAddr), "--server_name", "images")
	testkit.Eventually(t, 30*time.Second, "nats-server listening", func() bool {
		c, err := net.Dial("tcp", natsAddr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	common := []string{"--cluster", "e2e", "--log-format", "json", "--metrics-addr", "", "--nats-url", "nats://" + natsAddr}
	container(t, dir, "ingest", refs["ingest"], []string{"-v", logs + ":/logs:ro"},
		append([]string{"--audit-log", "/logs/audit.log", "--checkpoint-dir", "/tmp/checkpoints"}, common...)...)
	container(t, dir, "classify", refs["classify"], nil, common...)
	// No console: on the host's network its default 127.0.0.1:9104 may be another job's.
	// The sample's events are older than any retention: kept forever.
	container(t, dir, "report", refs["report"], nil, append([]string{"--clickhouse-dsn", ch.DSN("auditlens"), "--report-console-addr=", "--retention-days=0"}, common...)...)
	db, err := sql.Open("clickhouse", ch.DSN("default"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	testkit.Eventually(t, 180*time.Second, "every finding stored", func() bool { return len(stored(t, db)) >= len(want) })
	got := stored(t, db)
	var uniq uint64
	if err := db.QueryRow("SELECT uniqExact(cluster, audit_id, rule_id) FROM auditlens.findings").Scan(&uniq); err != nil {
		t.Fatal(err)
	}
	for k := range want {
		if !got[k] {
			t.Errorf("missing %s", k)
		}
	}
	if len(got) != len(want) || int(uniq) != len(want) {
		t.Fatalf("stored %d distinct findings (uniqExact %d), classify scan found %d", len(got), uniq, len(want))
	}
	t.Logf("three containers: %d events, %d findings stored, each once", events, uniq)
}

// TestArm64Images: the arm64 image of each service is arm64 in its config and its binary's ELF
// header, and its binary prints its version under qemu-user where Debian's qemu-user-static is
// installed, in the image's own filesystem (its loader and libc for report).
func TestArm64Images(t *testing.T) {
	v := version(t)
	qemu, qemuErr := exec.LookPath("qemu-aarch64-static")
	if qemuErr != nil && enginetest.InCI() {
		t.Fatalf("qemu-user-static is required in CI: %v", qemuErr)
	}
	for _, name := range []string{"ingest", "classify", "report"} {
		t.Run(name, func(t *testing.T) {
			archive := filepath.Join(imagesDir, name+".tar")
			if _, err := os.Stat(archive); err != nil {
				enginetest.Unavailable(t, "the images of make images", err)
			}
			blobs := readOCIArchive(t, archive)
			var index struct {
				Manifests []struct {
					Digest   string
					Platform struct{ Architecture, OS string }
				}
			}
			top := blobs["index.json"]
			var outer struct{ Manifests []struct{ Digest string } }
			if err := json.Unmarshal(top, &outer); err != nil || len(outer.Manifests) != 1 {
				t.Fatalf("index.json: %v %s", err, top)
			}
			if err := json.Unmarshal(blobs[outer.Manifests[0].Digest], &index); err != nil {
				t.Fatal(err)
			}
			var archs []string
			var arm string
			for _, m := range index.Manifests {
				archs = append(archs, m.Platform.OS+"/"+m.Platform.Architecture)
				if m.Platform.Architecture == "arm64" {
					arm = m.Digest
				}
			}
			if strings.Join(archs, ",") != "linux/amd64,linux/arm64" {
				t.Fatalf("platforms %v, want linux/amd64 and linux/arm64", archs)
			}
			var manifest struct {
				Config struct{ Digest string }
				Layers []struct{ Digest string }
			}
			if err := json.Unmarshal(blobs[arm], &manifest); err != nil {
				t.Fatal(err)
			}
			var cfg struct{ Architecture, OS string }
			if err := json.Unmarshal(blobs[manifest.Config.Digest], &cfg); err != nil || cfg.Architecture != "arm64" || cfg.OS != "linux" {
				t.Fatalf("arm64 image config says %s/%s (%v)", cfg.OS, cfg.Architecture, err)
			}
			root := t.TempDir()
			for _, l := range manifest.Layers {
				untar(t, blobs[l.Digest], root)
			}
			bin := filepath.Join(root, "usr/local/bin", name)
			f, err := elf.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			machine, class := f.Machine, f.Class
			f.Close()
			if machine != elf.EM_AARCH64 || class != elf.ELFCLASS64 {
				t.Fatalf("%s in the arm64 image is %v %v", name, machine, class)
			}
			if qemuErr != nil {
				t.Logf("qemu-user-static not installed: %s's arm64 binary not run", name)
				return
			}
			out, err := exec.Command(qemu, "-L", root, bin, "--version").CombinedOutput()
			if err != nil || !strings.HasPrefix(string(out), name+" "+v+"\n") || !strings.Contains(string(out), "linux/arm64") {
				t.Fatalf("qemu-aarch64-static %s --version: %v\n%s", name, err, out)
			}
		})
	}
}

// readOCIArchive returns index.json and every blob of an OCI archive, by digest.
func readOCIArchive(t *testing.T, archive string) map[string][]byte {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	blobs := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return blobs
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "index.json" {
			blobs[h.Name] = b
		} else if d, ok := strings.CutPrefix(h.Name, "blobs/sha256/"); ok {
			blobs["sha256:"+d] = b
		}
	}
}

// untar writes a gzipped layer's regular files and directories under root.
func untar(t *testing.T, layer []byte, root string) {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(layer))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(root, path.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, b, os.FileMode(h.Mode).Perm()|0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
}
