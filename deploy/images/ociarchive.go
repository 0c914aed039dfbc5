package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// writeOCIArchive writes idx as an OCI image layout in a tar: oci-layout, index.json naming
// ref, and every blob once under blobs/sha256, in a fixed order with fixed times.
func writeOCIArchive(path string, idx v1.ImageIndex, ref string, mtime time.Time) error {
	if _, err := nameTag(ref); err != nil {
		return err
	}
	blobs := map[string]func() (io.ReadCloser, int64, error){}
	addBytes := func(d v1.Hash, b []byte) {
		blobs[d.Hex] = func() (io.ReadCloser, int64, error) { return io.NopCloser(bytes.NewReader(b)), int64(len(b)), nil }
	}
	raw, err := idx.RawManifest()
	if err != nil {
		return err
	}
	idxDigest, err := idx.Digest()
	if err != nil {
		return err
	}
	addBytes(idxDigest, raw)
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, desc := range im.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return err
		}
		m, err := img.RawManifest()
		if err != nil {
			return err
		}
		addBytes(desc.Digest, m)
		cfgName, err := img.ConfigName()
		if err != nil {
			return err
		}
		cfg, err := img.RawConfigFile()
		if err != nil {
			return err
		}
		addBytes(cfgName, cfg)
		layers, err := img.Layers()
		if err != nil {
			return err
		}
		for _, l := range layers {
			d, err := l.Digest()
			if err != nil {
				return err
			}
			size, err := l.Size()
			if err != nil {
				return err
			}
			blobs[d.Hex] = func() (io.ReadCloser, int64, error) {
				rc, err := l.Compressed()
				return rc, size, err
			}
		}
	}
	index := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{{
		MediaType: types.OCIImageIndex, Digest: idxDigest, Size: int64(len(raw)),
		Annotations: map[string]string{"org.opencontainers.image.ref.name": ref},
	}}}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	put := func(name string, mode int64, size int64, r io.Reader) error {
		h := &tar.Header{Name: name, Mode: mode, Size: size, ModTime: mtime, Format: tar.FormatPAX}
		if r == nil {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if r != nil {
			n, err := io.Copy(tw, r)
			if err != nil {
				return err
			}
			if n != size {
				return fmt.Errorf("%s: wrote %d bytes, want %d", name, n, size)
			}
		}
		return nil
	}
	layout := []byte(`{"imageLayoutVersion":"1.0.0"}`)
	if err := put("oci-layout", 0o644, int64(len(layout)), bytes.NewReader(layout)); err != nil {
		return err
	}
	if err := put("index.json", 0o644, int64(len(indexJSON)), bytes.NewReader(indexJSON)); err != nil {
		return err
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := put(d, 0o755, 0, nil); err != nil {
			return err
		}
	}
	hexes := make([]string, 0, len(blobs))
	for h := range blobs {
		hexes = append(hexes, h)
	}
	sort.Strings(hexes)
	for _, h := range hexes {
		rc, size, err := blobs[h]()
		if err != nil {
			return err
		}
		err = put("blobs/sha256/"+h, 0o644, size, rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("blob %s: %w", h, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}
