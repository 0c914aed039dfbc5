package main

import (
	"archive/tar"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/auditlens/auditlens/deploy/release/gobuild"
)

var binaries = []string{"ingest", "classify", "report", "auditlens"}

// Largest compressed image: the binaries are 20 to 60 MB; glibc adds about 1 MB.
const maxCompressedSize = 40 << 20

var built = map[string]string{} // binary name -> path

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "auditlens-images-")
	if err != nil {
		panic(err)
	}
	stamp := gobuild.Stamp{Version: "0.1.0", Commit: "0123456789abcdef0123456789abcdef01234567", Date: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	for _, name := range binaries {
		bin := filepath.Join(dir, name)
		if err := gobuild.Build("../..", name, gobuild.Platform{OS: "linux", Arch: "amd64"}, stamp, bin); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		built[name] = bin
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func config() Config {
	lib := os.Getenv("CHDB_LIB_PATH")
	if lib == "" {
		lib = "../../.cache/chdb/libchdb.so"
	}
	return Config{Registry: "ghcr.io/auditlens", Version: "0.1.0", Revision: "0123456789abcdef0123456789abcdef01234567",
		Source: "https://github.com/auditlens/auditlens", CACerts: "/etc/ssl/certs/ca-certificates.crt",
		Created: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		Libchdb: lib, LibchdbNotice: "../licenses/libchdb.txt", Legal: []string{"../../LICENSE", "../../NOTICE"}}
}

// needLibchdb skips (fails in CI) a test of the all-in-one image when libchdb is missing.
func needLibchdb(t *testing.T, c Config) {
	t.Helper()
	if _, err := os.Stat(c.Libchdb); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("libchdb is required in CI: %v", err)
		}
		t.Skipf("libchdb unavailable (make chdb), skipping the all-in-one image: %v", err)
	}
}

// readArchive opens an OCI archive as a registry client would: its index, named by ref.
func readArchive(t *testing.T, path, ref string) v1.ImageIndex {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(dst, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		w, err := os.Create(dst)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(w, tr); err != nil {
			t.Fatal(err)
		}
		w.Close()
	}
	outer, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := outer.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != ref {
		t.Fatalf("index.json names %+v, want one index named %s", m.Manifests, ref)
	}
	idx, err := outer.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

// TestImages opens each archive as a registry client would and checks what a cluster relies on.
func TestImages(t *testing.T) {
	c := config()
	dir := t.TempDir()
	for _, bin := range binaries {
		t.Run(bin, func(t *testing.T) {
			if bin == "auditlens" {
				needLibchdb(t, c)
			}
			path := filepath.Join(dir, bin+".tar")
			digest, err := c.WriteArchive(path, bin, map[string]string{"amd64": built[bin]})
			if err != nil {
				t.Fatal(err)
			}
			tag := c.Ref(bin)
			idx := readArchive(t, path, tag)
			if d, _ := idx.Digest(); d != digest {
				t.Errorf("archive's index digest %s, WriteArchive said %s", d, digest)
			}
			im, err := idx.IndexManifest()
			if err != nil || len(im.Manifests) != 1 || im.Manifests[0].Platform == nil || im.Manifests[0].Platform.Architecture != "amd64" {
				t.Fatalf("index manifest %+v, %v", im, err)
			}
			img, err := idx.Image(im.Manifests[0].Digest)
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			cfg := cf.Config
			if cfg.User != "65532:65532" {
				t.Errorf("user %q", cfg.User)
			}
			if want := "/usr/local/bin/" + bin; len(cfg.Entrypoint) != 1 || cfg.Entrypoint[0] != want || len(cfg.Cmd) != 0 {
				t.Errorf("entrypoint %q cmd %q, want [%s]", cfg.Entrypoint, cfg.Cmd, want)
			}
			for k, v := range map[string]string{"org.opencontainers.image.source": c.Source, "org.opencontainers.image.version": "0.1.0",
				"org.opencontainers.image.revision": c.Revision, "org.opencontainers.image.licenses": "Apache-2.0"} {
				if cfg.Labels[k] != v {
					t.Errorf("label %s %q, want %q", k, cfg.Labels[k], v)
				}
			}
			if !cf.Created.Equal(c.Created) || cf.OS != "linux" || cf.Architecture != "amd64" {
				t.Errorf("created %s, platform %s/%s", cf.Created, cf.OS, cf.Architecture)
			}

			// The filesystem: no shell, no package manager, nothing but what is listed.
			root := t.TempDir()
			files := extract(t, img, root)
			for p := range files {
				base := filepath.Base(p)
				if base == "sh" || base == "bash" || base == "ash" || base == "dash" || base == "busybox" || strings.HasPrefix(p, "bin/") {
					t.Errorf("image holds %s", p)
				}
				allInOne := bin == "auditlens" && (strings.HasPrefix(p, "usr/local/lib") || strings.HasPrefix(p, "usr/local/share") || p == "data")
				if p != "etc" && !strings.HasPrefix(p, "etc/") && p != "usr" && p != "usr/local" && !strings.HasPrefix(p, "usr/local/bin") &&
					!strings.HasPrefix(p, "home") && p != "tmp" && !strings.HasPrefix(p, "lib") && !allInOne {
					t.Errorf("unexpected file %s", p)
				}
			}
			for _, p := range []string{"usr/local/bin/" + bin, "etc/ssl/certs/ca-certificates.crt", "etc/passwd"} {
				if files[p] == nil {
					t.Errorf("image lacks %s", p)
				}
			}
			if h := files["usr/local/bin/"+bin]; h != nil && (h.Mode != 0o755 || h.Uid != 0) {
				t.Errorf("binary mode %o owner %d", h.Mode, h.Uid)
			}
			if (bin == "ingest" || bin == "classify") && files["lib64/ld-linux-x86-64.so.2"] != nil {
				t.Errorf("%s is static: its image needs no loader", bin)
			}
			if bin == "auditlens" {
				for _, p := range []string{"usr/local/lib/libchdb.so", "usr/local/share/doc/auditlens/libchdb-NOTICE.txt", "usr/local/share/doc/auditlens/NOTICE",
					"usr/local/share/doc/auditlens/LICENSE", "lib/x86_64-linux-gnu/librt.so.1", "lib/x86_64-linux-gnu/libm.so.6"} {
					if files[p] == nil {
						t.Errorf("the all-in-one image lacks %s", p)
					}
				}
				if _, vol := cfg.Volumes["/data"]; files["data"] == nil || files["data"].Uid != UID || !vol {
					t.Errorf("data directory %+v, volumes %v", files["data"], cfg.Volumes)
				}
			}

			// The binary inside runs: on this machine, and chrooted into the image's own
			// filesystem as its user (proving the image carries all it needs, loader included).
			out, err := exec.Command(filepath.Join(root, "usr/local/bin", bin), "--help").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "--log-format") {
				t.Errorf("%s --help: %v\n%s", bin, err, out)
			}
			if os.Geteuid() == 0 {
				cmd := exec.Command(cfg.Entrypoint[0], "--help")
				cmd.Dir = "/"
				cmd.Env = cfg.Env
				cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("%s --help inside the image's filesystem: %v\n%s", bin, err, out)
				}
			} else {
				t.Log("not root: the chrooted run inside the image's filesystem is skipped")
			}

			layers, _ := img.Layers()
			var size int64
			for _, l := range layers {
				s, _ := l.Size()
				size += s
			}
			st, _ := os.Stat(path)
			t.Logf("%s: %d layers, %.1f MB compressed, archive %.1f MB, %s", tag, len(layers), float64(size)/1e6, float64(st.Size())/1e6, digest)
			if bin != "auditlens" && size > maxCompressedSize {
				t.Errorf("image is %d bytes compressed, more than %d", size, maxCompressedSize)
			}
		})
	}
}

// extract writes the image's flattened filesystem under root and returns its entries.
func extract(t *testing.T, img v1.Image, root string) map[string]*tar.Header {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	files := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := strings.TrimSuffix(strings.TrimPrefix(h.Name, "/"), "/")
		files[p] = h
		dst := filepath.Join(root, p)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, os.FileMode(h.Mode).Perm()|0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dst, os.FileMode(h.Mode).Perm()|0o755); err != nil {
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
			if err := os.WriteFile(dst, b, os.FileMode(h.Mode).Perm()); err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("unexpected entry type %c for %s", h.Typeflag, p)
		}
	}
	return files
}

// TestReproducible: building twice from the same binaries gives the same digest and the same
// archive bytes.
func TestReproducible(t *testing.T) {
	c := config()
	sum := func(dir string) ([32]byte, string) {
		p := filepath.Join(dir, "report.tar")
		d, err := c.WriteArchive(p, "report", map[string]string{"amd64": built["report"]})
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return sha256.Sum256(b), d.String()
	}
	a, da := sum(t.TempDir())
	b, db := sum(t.TempDir())
	if a != b || da != db {
		t.Fatalf("two builds differ: digests %s and %s", da, db)
	}
	c.Revision = "fedcba9876543210fedcba9876543210fedcba98"
	if _, d := sum(t.TempDir()); d == da {
		t.Fatal("another revision gave the same digest: is the label written?")
	}
}

// The Dockerfile builds the same layout as this program.
func TestDockerfileSameLayout(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	for _, want := range []string{"FROM scratch", "USER 65532:65532", `ENTRYPOINT ["/usr/local/bin/ingest"]`, `ENTRYPOINT ["/usr/local/bin/auditlens"]`, "CGO_ENABLED=0",
		"-trimpath", "-tags timetzdata", "/etc/ssl/certs/ca-certificates.crt", "org.opencontainers.image.source",
		"org.opencontainers.image.version", "org.opencontainers.image.revision", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
		"WORKDIR /home/nonroot"} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}
