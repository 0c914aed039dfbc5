package sign

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"
)

// refAnnotation names an image in an OCI layout's index.json.
const refAnnotation = "org.opencontainers.image.ref.name"

// Image is what an OCI archive holds: its reference and the digest of the image index (or
// manifest) a registry would serve for it, every blob checked against its name.
type Image struct {
	Ref, Digest string
}

// Repository is Ref without its tag: the identity cosign signs.
func (i Image) Repository() string {
	if at := strings.LastIndexByte(i.Ref, ':'); at > strings.LastIndexByte(i.Ref, '/') {
		return i.Ref[:at]
	}
	return i.Ref
}

// ReadImage reads an OCI archive (an OCI layout in a tar, as make images writes): the one image
// of its index.json, after checking that every blob hashes to its name and every descriptor
// reachable from the index is present with its size. A signature of the digest thus covers
// every byte of the image.
func ReadImage(path string) (Image, error) {
	f, err := os.Open(path)
	if err != nil {
		return Image{}, err
	}
	defer f.Close()
	blobs := map[string]int64{} // digest -> size
	// docs are the blobs small enough to be an index or a manifest, kept from the one pass.
	docs := map[string][]byte{}
	var index []byte
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Image{}, fmt.Errorf("%s: %w", path, err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		switch {
		case name == "index.json":
			if index, err = io.ReadAll(io.LimitReader(tr, 1<<20)); err != nil {
				return Image{}, err
			}
		case strings.HasPrefix(name, "blobs/sha256/") && h.Typeflag == tar.TypeReg:
			want := strings.TrimPrefix(name, "blobs/sha256/")
			hash := sha256.New()
			var doc bytes.Buffer
			w := io.Writer(hash)
			if h.Size <= maxDoc {
				w = io.MultiWriter(hash, &doc)
			}
			n, err := io.Copy(w, tr)
			if err != nil {
				return Image{}, err
			}
			if got := hex.EncodeToString(hash.Sum(nil)); got != want {
				return Image{}, fmt.Errorf("%s: blob %s has sha256 %s", filepath.Base(path), want, got)
			}
			blobs["sha256:"+want] = n
			if doc.Len() > 0 {
				docs["sha256:"+want] = doc.Bytes()
			}
		}
	}
	var idx struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Size        int64             `json:"size"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(index, &idx); err != nil {
		return Image{}, fmt.Errorf("%s: index.json: %w", filepath.Base(path), err)
	}
	if len(idx.Manifests) != 1 {
		return Image{}, fmt.Errorf("%s: index.json names %d images, want 1", filepath.Base(path), len(idx.Manifests))
	}
	top := idx.Manifests[0]
	img := Image{Ref: top.Annotations[refAnnotation], Digest: top.Digest}
	if img.Ref == "" {
		return Image{}, fmt.Errorf("%s: the image has no %s", filepath.Base(path), refAnnotation)
	}
	if err := reachable(path, blobs, docs, top.Digest, top.Size, 0); err != nil {
		return Image{}, err
	}
	return img, nil
}

// maxDoc is the largest blob read as a possible index or manifest (they are a few KB).
const maxDoc = 1 << 20

// reachable checks that the blob digest is present with its size and, for an index or a
// manifest, every descriptor it names.
func reachable(path string, blobs map[string]int64, docs map[string][]byte, digest string, size int64, depth int) error {
	n, ok := blobs[digest]
	if !ok || n != size {
		return fmt.Errorf("%s: blob %s missing or not of size %d", filepath.Base(path), digest, size)
	}
	if depth > 3 {
		return nil
	}
	b := docs[digest]
	var doc struct {
		MediaType string `json:"mediaType"`
		Manifests []struct {
			Digest string `json:"digest"`
			Size   int64  `json:"size"`
		} `json:"manifests"`
		Config *struct {
			Digest string `json:"digest"`
			Size   int64  `json:"size"`
		} `json:"config"`
		Layers []struct {
			Digest string `json:"digest"`
			Size   int64  `json:"size"`
		} `json:"layers"`
	}
	if b == nil || !json.Valid(b) {
		return nil // a layer or a config: its bytes were checked
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("%s: %s: %w", filepath.Base(path), digest, err)
	}
	for _, m := range doc.Manifests {
		if err := reachable(path, blobs, docs, m.Digest, m.Size, depth+1); err != nil {
			return err
		}
	}
	if doc.Config != nil {
		if n, ok := blobs[doc.Config.Digest]; !ok || n != doc.Config.Size {
			return fmt.Errorf("%s: config %s missing", filepath.Base(path), doc.Config.Digest)
		}
	}
	for _, l := range doc.Layers {
		if n, ok := blobs[l.Digest]; !ok || n != l.Size {
			return fmt.Errorf("%s: layer %s missing", filepath.Base(path), l.Digest)
		}
	}
	return nil
}

// SignImage writes ARCHIVE.payload.json, cosign's simple-signing payload naming the image's
// repository and digest, and ARCHIVE.sig, its base64 signature.
func SignImage(s signature.Signer, archive string) (Image, error) {
	img, err := ReadImage(archive)
	if err != nil {
		return Image{}, err
	}
	p, err := json.Marshal(simpleSigning(img))
	if err != nil {
		return Image{}, err
	}
	sig, err := s.SignMessage(bytes.NewReader(p))
	if err != nil {
		return Image{}, fmt.Errorf("sign %s: %w", filepath.Base(archive), err)
	}
	if err := os.WriteFile(archive+PayloadSuffix, p, 0o644); err != nil {
		return Image{}, err
	}
	return img, os.WriteFile(archive+SigSuffix, []byte(base64.StdEncoding.EncodeToString(sig)+"\n"), 0o644)
}

// VerifyImage checks an archive: its payload's signature, and that the payload names the
// archive's repository and digest (every blob checked, see ReadImage).
func VerifyImage(v signature.Verifier, archive string) (Image, error) {
	img, err := ReadImage(archive)
	if err != nil {
		return Image{}, err
	}
	p, err := os.ReadFile(archive + PayloadSuffix)
	if err != nil {
		return Image{}, fmt.Errorf("%s: not signed (%w)", filepath.Base(archive), err)
	}
	sig, err := readSig(archive + SigSuffix)
	if err != nil {
		return Image{}, err
	}
	if err := v.VerifySignature(bytes.NewReader(sig), bytes.NewReader(p)); err != nil {
		return Image{}, fmt.Errorf("%s: the signature does not match (%w)", filepath.Base(archive), err)
	}
	var got payload.SimpleContainerImage
	if err := json.Unmarshal(p, &got); err != nil {
		return Image{}, fmt.Errorf("%s: payload: %w", filepath.Base(archive), err)
	}
	if want := simpleSigning(img); got.Critical != want.Critical {
		return Image{}, fmt.Errorf("%s: signed %s@%s, the archive holds %s@%s", filepath.Base(archive),
			got.Critical.Identity.DockerReference, got.Critical.Image.DockerManifestDigest, img.Repository(), img.Digest)
	}
	return img, nil
}

func simpleSigning(img Image) payload.SimpleContainerImage {
	return payload.SimpleContainerImage{Critical: payload.Critical{
		Identity: payload.Identity{DockerReference: img.Repository()},
		Image:    payload.Image{DockerManifestDigest: img.Digest},
		Type:     payload.CosignSignatureType,
	}}
}
