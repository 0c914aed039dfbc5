package node

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// pauseArchive builds cmd/pause (static) into a one-layer image and writes it as an image
// archive containerd imports: <Root>/images/pause.tar.
func (n *Node) pauseArchive() (string, error) {
	dir := filepath.Join(n.cfg.Root, "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	archive := filepath.Join(dir, "pause.tar")
	if _, err := os.Stat(archive); err == nil {
		return archive, nil
	}
	bin := filepath.Join(dir, "pause")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./cmd/pause")
	cmd.Dir = filepath.Join(n.cfg.Repo, "deploy", "node")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build pause: %w\n%s", err, out)
	}
	body, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
		return "", err
	}
	if _, err := tw.Write(body); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer.Bytes())), nil })
	if err != nil {
		return "", err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return "", err
	}
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: runtime.GOARCH, OS: "linux",
		Config: v1.Config{Entrypoint: []string{"/pause"}, User: "65535:65535"},
		RootFS: v1.RootFS{Type: "layers", DiffIDs: mustDiffIDs(img)},
	})
	if err != nil {
		return "", err
	}
	ref, err := name.NewTag(PauseImage)
	if err != nil {
		return "", err
	}
	tmp := archive + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		return "", err
	}
	return archive, os.Rename(tmp, archive)
}

func mustDiffIDs(img v1.Image) []v1.Hash {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil
	}
	return cf.RootFS.DiffIDs
}
