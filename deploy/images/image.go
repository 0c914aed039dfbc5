package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The layout every image shares (the Dockerfile writes the same).
const (
	UID      = 65532
	BinDir   = "/usr/local/bin"
	CertFile = "/etc/ssl/certs/ca-certificates.crt"
)

// Config is what one build of the images is made of.
type Config struct {
	// Registry prefixes every image's name: <registry>/<binary>:<version>.
	Registry, Version, Revision, Source string
	CACerts                             string // host file copied to CertFile
	Created                             time.Time
	// LibDirs are searched for the libraries a dynamically linked binary needs, per
	// architecture (default: Debian's for amd64, and its arm64 cross libc, libc6-arm64-cross).
	LibDirs map[string][]string
	// Libchdb is libchdb.so, put into the all-in-one image (at LibchdbPath) with its notices
	// (LibchdbNotice) and the repository's LICENSE and NOTICE (Legal).
	Libchdb, LibchdbNotice string
	Legal                  []string
}

// Ref is the fully qualified reference of binary's image.
func (c Config) Ref(binary string) string { return c.Registry + "/" + binary + ":" + c.Version }

// Where the all-in-one image keeps libchdb (the default of chdb.LibraryPath), its licence
// files and its data (a volume).
const (
	LibchdbPath = "/usr/local/lib/libchdb.so"
	DocDir      = "/usr/local/share/doc/auditlens"
	DataDir     = "/data"
)

var defaultLibDirs = map[string][]string{
	"amd64": {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"},
	"arm64": {"/usr/aarch64-linux-gnu/lib"},
}

// libDest is where a library found for arch goes in the image: its own path on the build
// machine for amd64, and arm64's multiarch directory for the cross libc.
func libDest(arch, src string) string {
	if arch == "arm64" {
		return "/lib/aarch64-linux-gnu/" + filepath.Base(src)
	}
	return src
}

// file is one entry of a layer.
type file struct {
	path string // absolute, in the image
	mode int64
	uid  int
	data []byte // nil for a directory
}

// layer writes files into an uncompressed tar with fixed owners and times, parents first.
func (c Config) layer(files []file) (v1.Layer, error) {
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.path[1:], Mode: f.mode, Uid: f.uid, Gid: f.uid, ModTime: c.Created, Format: tar.FormatPAX}
		if f.data == nil {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("write layer entry %s: %w", f.path, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, fmt.Errorf("write layer entry %s: %w", f.path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}

func dirs(paths ...string) []file {
	var out []file
	for _, p := range paths {
		out = append(out, file{path: p, mode: 0o755})
	}
	return out
}

// base holds what every binary needs besides itself: the users and the CA certificates.
func (c Config) base() ([]file, error) {
	certs, err := os.ReadFile(c.CACerts)
	if err != nil {
		return nil, fmt.Errorf("read CA certificates: %w", err)
	}
	files := dirs("/etc", "/etc/ssl", "/etc/ssl/certs", "/home", "/usr", "/usr/local", BinDir)
	return append(files,
		file{path: "/etc/passwd", mode: 0o644, data: fmt.Appendf(nil, "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", UID, UID)},
		file{path: "/etc/group", mode: 0o644, data: fmt.Appendf(nil, "root:x:0:\nnonroot:x:%d:\n", UID)},
		file{path: "/etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")},
		file{path: CertFile, mode: 0o644, data: certs},
		file{path: "/home/nonroot", mode: 0o700, uid: UID},
		file{path: "/tmp", mode: 0o1777},
	), nil
}

// runtime returns the dynamic loader and the libraries bin names (and those of extra, a
// library the binary loads with dlopen), from the build machine, or nothing for a static
// binary.
func (c Config) runtime(bin, arch string, extra ...string) ([]file, error) {
	f, err := elf.Open(bin)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", bin, err)
	}
	defer f.Close()
	var interp string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				return nil, fmt.Errorf("read %s interpreter: %w", bin, err)
			}
			interp = string(bytes.TrimRight(b, "\x00"))
		}
	}
	if interp == "" {
		return nil, nil
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("read %s libraries: %w", bin, err)
	}
	for _, x := range extra {
		xf, err := elf.Open(x)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", x, err)
		}
		more, err := xf.ImportedLibraries()
		xf.Close()
		if err != nil {
			return nil, fmt.Errorf("read %s libraries: %w", x, err)
		}
		libs = append(libs, more...)
	}
	libDirs := c.LibDirs[arch]
	if len(libDirs) == 0 {
		libDirs = defaultLibDirs[arch]
	}
	seen := map[string]bool{}
	var files []file
	add := func(src, dst string) error {
		if seen[dst] {
			return nil
		}
		seen[dst] = true
		data, err := os.ReadFile(src) // follows symbolic links: the image holds the content
		if err != nil {
			return fmt.Errorf("copy %s's runtime: %w", bin, err)
		}
		for d := filepath.Dir(dst); d != "/" && !seen[d]; d = filepath.Dir(d) {
			seen[d] = true
			files = append(files, file{path: d, mode: 0o755})
		}
		files = append(files, file{path: dst, mode: 0o755, data: data})
		return nil
	}
	interpSrc := interp
	if arch == "arm64" {
		interpSrc = filepath.Join(libDirs[0], filepath.Base(interp))
	}
	if err := add(interpSrc, interp); err != nil {
		return nil, err
	}
	for _, lib := range libs {
		if lib == filepath.Base(interp) {
			continue // the loader, already there
		}
		found := false
		for _, d := range libDirs {
			if p := filepath.Join(d, lib); fileExists(p) {
				if err := add(p, libDest(arch, p)); err != nil {
					return nil, err
				}
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("copy %s's runtime: %s not found in %v", bin, lib, libDirs)
		}
	}
	return files, nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// Image assembles the image of one binary built for linux/arch. The all-in-one (auditlens)
// also holds libchdb, its notices and a data volume, and listens on all interfaces.
func (c Config) Image(name, bin, arch string) (v1.Image, error) {
	if c.Version == "" || c.Revision == "" || c.Created.IsZero() {
		return nil, errors.New("version, revision and creation time are required")
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("read binary: %w", err)
	}
	baseFiles, err := c.base()
	if err != nil {
		return nil, err
	}
	allInOne := name == "auditlens"
	var extra []string
	var chdbFiles []file
	if allInOne {
		if c.Libchdb == "" || arch != "amd64" {
			return nil, fmt.Errorf("the all-in-one image is built for amd64 with libchdb (-libchdb), not %s", arch)
		}
		extra = append(extra, c.Libchdb)
		lib, err := os.ReadFile(c.Libchdb)
		if err != nil {
			return nil, fmt.Errorf("read libchdb: %w", err)
		}
		chdbFiles = append(dirs("/usr/local/lib", "/usr/local/share", "/usr/local/share/doc", DocDir),
			file{path: LibchdbPath, mode: 0o755, data: lib})
		for _, p := range append([]string{c.LibchdbNotice}, c.Legal...) {
			b, err := os.ReadFile(p)
			if err != nil {
				return nil, fmt.Errorf("read notices: %w", err)
			}
			dst := DocDir + "/" + filepath.Base(p)
			if p == c.LibchdbNotice {
				dst = DocDir + "/libchdb-NOTICE.txt"
			}
			chdbFiles = append(chdbFiles, file{path: dst, mode: 0o644, data: b})
		}
		baseFiles = append(baseFiles, file{path: DataDir, mode: 0o700, uid: UID})
	}
	rt, err := c.runtime(bin, arch, extra...)
	if err != nil {
		return nil, err
	}
	parts := []struct {
		files   []file
		comment string
	}{
		{baseFiles, "CA certificates, users"},
		{rt, "dynamic loader and libraries (glibc) the binary names"},
		{chdbFiles, "libchdb (embedded ClickHouse) and the licence notices"},
		{[]file{{path: BinDir + "/" + name, mode: 0o755, data: data}}, name + " binary"},
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	created := v1.Time{Time: c.Created}
	for _, p := range parts {
		if len(p.files) == 0 {
			continue
		}
		l, err := c.layer(p.files)
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{Layer: l, MediaType: types.OCILayer,
			History: v1.History{Created: created, CreatedBy: "deploy/images", Comment: p.comment}})
		if err != nil {
			return nil, fmt.Errorf("add layer: %w", err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = arch, "linux"
	if arch == "arm64" {
		cf.Variant = "v8"
	}
	cf.Created = created
	labels := c.labels(name)
	cf.Config = v1.Config{
		User:         fmt.Sprintf("%d:%d", UID, UID),
		Entrypoint:   []string{BinDir + "/" + name},
		Env:          []string{"PATH=" + BinDir, "SSL_CERT_FILE=" + CertFile},
		WorkingDir:   "/home/nonroot",
		ExposedPorts: map[string]struct{}{"9090/tcp": {}},
		Labels:       labels,
	}
	if allInOne {
		// Alone in a container: metrics on every interface (-p 9100:9100); the console's
		// listener too, which still answers loopback clients only unless the user adds
		// --report-console-allow-remote (published on the host's loopback: -p
		// 127.0.0.1:9101:9101); every data location under the volume.
		cf.Config.Env = append(cf.Config.Env, "AUDITLENS_METRICS_ADDR=:9100", "AUDITLENS_REPORT_CONSOLE_ADDR=:9101",
			"AUDITLENS_DATA_ROOT="+DataDir, "CHDB_LIB_PATH="+LibchdbPath)
		cf.Config.ExposedPorts = map[string]struct{}{"9100/tcp": {}, "9101/tcp": {}}
		cf.Config.Volumes = map[string]struct{}{DataDir: {}}
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, labels).(v1.Image), nil
}

// labels are the OCI labels (and the manifests' annotations) of binary's image.
func (c Config) labels(name string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    "auditlens " + name,
		"org.opencontainers.image.source":   c.Source,
		"org.opencontainers.image.version":  c.Version,
		"org.opencontainers.image.revision": c.Revision,
		"org.opencontainers.image.created":  c.Created.Format(time.RFC3339),
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.ref.name": c.Ref(name),
	}
}

// Index assembles the image index of binary name from its builds, one per architecture.
func (c Config) Index(name string, bins map[string]string) (v1.ImageIndex, error) {
	archs := make([]string, 0, len(bins))
	for a := range bins {
		archs = append(archs, a)
	}
	sort.Strings(archs)
	var adds []mutate.IndexAddendum
	for _, arch := range archs {
		img, err := c.Image(name, bins[arch], arch)
		if err != nil {
			return nil, fmt.Errorf("build image %s for %s: %w", name, arch, err)
		}
		p := &v1.Platform{OS: "linux", Architecture: arch}
		if arch == "arm64" {
			p.Variant = "v8"
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{MediaType: types.OCIManifestSchema1, Platform: p}})
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	idx = mutate.AppendManifests(idx, adds...)
	labels := c.labels(name)
	delete(labels, "org.opencontainers.image.ref.name")
	return mutate.Annotations(idx, labels).(v1.ImageIndex), nil
}

// WriteArchive writes the index of name as an OCI archive (an OCI image layout in a tar, as
// podman load, skopeo and crane read it), its reference in the ref.name annotation, and
// returns the index's digest (what a registry will know it by).
func (c Config) WriteArchive(path, name string, bins map[string]string) (v1.Hash, error) {
	idx, err := c.Index(name, bins)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := writeOCIArchive(path, idx, c.Ref(name), c.Created); err != nil {
		return v1.Hash{}, fmt.Errorf("write %s: %w", path, err)
	}
	return idx.Digest()
}

func nameTag(s string) (name.Tag, error) {
	t, err := name.NewTag(s)
	if err != nil {
		return name.Tag{}, fmt.Errorf("image name %q: %w", s, err)
	}
	return t, nil
}
