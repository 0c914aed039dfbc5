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
	Repository, Version, Revision, Source string
	CACerts                               string // host file copied to CertFile
	Created                               time.Time
	// LibDirs are searched for the libraries a dynamically linked binary needs.
	LibDirs []string
}

func (c Config) Tag(binary string) string { return c.Repository + "/" + binary + ":" + c.Version }

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
		tarball.WithMediaType(types.OCILayer))
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

// runtime returns the dynamic loader and the libraries bin names, from the build machine, or
// nothing for a static binary.
func (c Config) runtime(bin string) ([]file, error) {
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
	libDirs := c.LibDirs
	if len(libDirs) == 0 {
		libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}
	}
	seen := map[string]bool{}
	var files []file
	add := func(path string) error {
		data, err := os.ReadFile(path) // follows symbolic links: the image holds the content
		if err != nil {
			return fmt.Errorf("copy %s's runtime: %w", bin, err)
		}
		for d := filepath.Dir(path); d != "/" && !seen[d]; d = filepath.Dir(d) {
			seen[d] = true
			files = append(files, file{path: d, mode: 0o755})
		}
		files = append(files, file{path: path, mode: 0o755, data: data})
		return nil
	}
	if err := add(interp); err != nil {
		return nil, err
	}
	for _, lib := range libs {
		found := false
		for _, d := range libDirs {
			if p := filepath.Join(d, lib); fileExists(p) {
				if err := add(p); err != nil {
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

// Image assembles the image of one binary.
func (c Config) Image(name, bin string) (v1.Image, error) {
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
	rt, err := c.runtime(bin)
	if err != nil {
		return nil, err
	}
	parts := []struct {
		files   []file
		comment string
	}{
		{baseFiles, "CA certificates, users"},
		{rt, "dynamic loader and libraries (glibc) the binary names"},
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
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = created
	cf.Config = v1.Config{
		User:         fmt.Sprintf("%d:%d", UID, UID),
		Entrypoint:   []string{BinDir + "/" + name},
		Env:          []string{"PATH=" + BinDir, "SSL_CERT_FILE=" + CertFile},
		WorkingDir:   "/home/nonroot",
		ExposedPorts: map[string]struct{}{"9090/tcp": {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":    "auditlens " + name,
			"org.opencontainers.image.source":   c.Source,
			"org.opencontainers.image.version":  c.Version,
			"org.opencontainers.image.revision": c.Revision,
			"org.opencontainers.image.created":  c.Created.Format(time.RFC3339),
		},
	}
	return mutate.ConfigFile(img, cf)
}

// WriteArchive writes the image of bin, tagged c.Tag(name), to path and returns the digest it
// has once pushed.
func (c Config) WriteArchive(path, name, bin string) (v1.Hash, error) {
	img, err := c.Image(name, bin)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("build image %s: %w", name, err)
	}
	tag, err := nameTag(c.Tag(name))
	if err != nil {
		return v1.Hash{}, err
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		return v1.Hash{}, fmt.Errorf("write %s: %w", path, err)
	}
	// The digest a registry will know it by: the manifest of the image as read back from the
	// archive (docker-archive manifests are rebuilt by their readers, as crane push does).
	back, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("read back %s: %w", path, err)
	}
	return back.Digest()
}

func nameTag(s string) (name.Tag, error) {
	t, err := name.NewTag(s)
	if err != nil {
		return name.Tag{}, fmt.Errorf("image name %q: %w", s, err)
	}
	return t, nil
}
