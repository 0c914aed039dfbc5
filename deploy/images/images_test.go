package main

import (
	"archive/tar"
	"crypto/sha256"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
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
	for _, name := range binaries {
		bin, err := Build("../..", name, dir)
		if err != nil {
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
	return Config{Repository: "auditlens", Version: "0.1.0", Revision: "0123456789abcdef0123456789abcdef01234567",
		Source: "https://github.com/auditlens/auditlens", CACerts: "/etc/ssl/certs/ca-certificates.crt",
		Created: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
}

// TestImages opens each archive as a registry client would and checks what a cluster relies on.
func TestImages(t *testing.T) {
	c := config()
	dir := t.TempDir()
	for _, bin := range binaries {
		t.Run(bin, func(t *testing.T) {
			path := filepath.Join(dir, bin+".tar")
			digest, err := c.WriteArchive(path, bin, built[bin])
			if err != nil {
				t.Fatal(err)
			}
			tag, _ := name.NewTag(c.Tag(bin))
			img, err := tarball.ImageFromPath(path, &tag)
			if err != nil {
				t.Fatalf("open %s as %s: %v", path, tag, err)
			}
			if d, _ := img.Digest(); d != digest {
				t.Errorf("archive's image digest %s, WriteArchive said %s", d, digest)
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
				"org.opencontainers.image.revision": c.Revision} {
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
				if p != "etc" && !strings.HasPrefix(p, "etc/") && p != "usr" && p != "usr/local" && !strings.HasPrefix(p, "usr/local/bin") &&
					!strings.HasPrefix(p, "home") && p != "tmp" && !strings.HasPrefix(p, "lib") {
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
			if size > maxCompressedSize {
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
		d, err := c.WriteArchive(p, "report", built["report"])
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
