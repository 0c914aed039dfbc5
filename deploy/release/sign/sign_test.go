package sign

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sigstore/sigstore/pkg/signature"
)

// keyPair writes a new key pair in dir and loads both halves.
func keyPair(t *testing.T, dir string) (signature.Signer, signature.Verifier) {
	t.Helper()
	priv, pub, err := GenerateKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "k.key"), priv, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "k.pub"), pub, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := LoadSigner(filepath.Join(dir, "k.key"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := LoadVerifier(filepath.Join(dir, "k.pub"))
	if err != nil {
		t.Fatal(err)
	}
	return s, v
}

// fakeDist writes a release directory: two archives and their SHA256SUMS.
func fakeDist(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	var sums strings.Builder
	for _, f := range []struct{ name, data string }{{"auditlens_0.1.0_linux_amd64.tar.gz", "linux"}, {"auditlens_0.1.0_sbom.cdx.json", "{}"}} {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.data), 0o644); err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256([]byte(f.data))
		sums.WriteString(hex.EncodeToString(h[:]) + "  " + f.name + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, sumsFile), []byte(sums.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestDist: a signed release verifies; every way of altering it is refused, naming what.
func TestDist(t *testing.T) {
	s, v := keyPair(t, t.TempDir())
	_, other := keyPair(t, t.TempDir())
	build := Build{Source: "https://github.com/auditlens/auditlens", Commit: "abc", Version: "0.1.0", Command: "make release", GoVersion: "go1.26.8"}
	signed := func(t *testing.T) string {
		dir := fakeDist(t)
		if err := Dist(s, dir, build); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	dir := signed(t)
	files, err := VerifyDist(v, dir)
	if err != nil || len(files) != 4 {
		t.Fatalf("verify: %v %v", files, err)
	}
	// The provenance names the commit and each file with its digest.
	env, _ := os.ReadFile(filepath.Join(dir, Provenance))
	payload, err := dssePayload(v, env)
	if err != nil || !bytes.Contains(payload, []byte(`"gitCommit":"abc"`)) || !bytes.Contains(payload, []byte(`"name":"auditlens_0.1.0_linux_amd64.tar.gz"`)) {
		t.Errorf("provenance: %v %s", err, payload)
	}

	for _, c := range []struct {
		name, want string
		alter      func(dir string)
	}{
		{"an archive changed", "auditlens_0.1.0_linux_amd64.tar.gz: sha256", func(dir string) {
			_ = os.WriteFile(filepath.Join(dir, "auditlens_0.1.0_linux_amd64.tar.gz"), []byte("evil"), 0o644)
		}},
		{"an archive and its line changed", "SHA256SUMS: the signature does not match", func(dir string) {
			_ = os.WriteFile(filepath.Join(dir, "auditlens_0.1.0_linux_amd64.tar.gz"), []byte("evil"), 0o644)
			h := sha256.Sum256([]byte("evil"))
			b, _ := os.ReadFile(filepath.Join(dir, sumsFile))
			lines := strings.SplitN(string(b), "\n", 2)
			_ = os.WriteFile(filepath.Join(dir, sumsFile), []byte(hex.EncodeToString(h[:])+"  auditlens_0.1.0_linux_amd64.tar.gz\n"+lines[1]), 0o644)
		}},
		{"a signature missing", "auditlens_0.1.0_sbom.cdx.json: not signed", func(dir string) {
			_ = os.Remove(filepath.Join(dir, "auditlens_0.1.0_sbom.cdx.json.sig"))
		}},
		{"a signature swapped", "auditlens_0.1.0_sbom.cdx.json: the signature does not match", func(dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, "auditlens_0.1.0_linux_amd64.tar.gz.sig"))
			_ = os.WriteFile(filepath.Join(dir, "auditlens_0.1.0_sbom.cdx.json.sig"), b, 0o644)
		}},
		{"the provenance's payload changed", Provenance + ": the signature does not match", func(dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, Provenance))
			var e map[string]any
			_ = json.Unmarshal(b, &e)
			e["payload"] = "e30=" // {}
			b, _ = json.Marshal(e)
			_ = os.WriteFile(filepath.Join(dir, Provenance), b, 0o644)
		}},
		{"the provenance missing", "provenance", func(dir string) { _ = os.Remove(filepath.Join(dir, Provenance)) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := signed(t)
			c.alter(dir)
			if _, err := VerifyDist(v, dir); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("verify: %v, want %q", err, c.want)
			}
		})
	}
	if _, err := VerifyDist(other, signed(t)); err == nil || !strings.Contains(err.Error(), "SHA256SUMS: the signature does not match") {
		t.Errorf("verify with another key: %v", err)
	}
}

// ociArchive writes an OCI layout tar as make images does: an index naming one image index,
// which names one manifest, its config and one layer.
func ociArchive(t *testing.T, path, ref, layer string) {
	t.Helper()
	blobs := map[string][]byte{}
	add := func(b []byte) (string, int) {
		h := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(h[:])
		blobs[d] = b
		return d, len(b)
	}
	ld, ls := add([]byte(layer))
	cd, cs := add([]byte(`{"architecture":"amd64","os":"linux"}`))
	m, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": ld, "size": ls}}})
	md, ms := add(m)
	ix, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
		"manifests": []any{map[string]any{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": ms}}})
	xd, xs := add(ix)
	index, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{map[string]any{
		"mediaType": "application/vnd.oci.image.index.v1+json", "digest": xd, "size": xs, "annotations": map[string]string{refAnnotation: ref}}}})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	file := func(name string, b []byte) {
		_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg})
		_, _ = tw.Write(b)
	}
	file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	file("index.json", index)
	for d, b := range blobs {
		file("blobs/sha256/"+strings.TrimPrefix(d, "sha256:"), b)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestImage: an image archive is signed by the digest of its index in cosign's payload; a
// changed byte anywhere, another image's signature, or another key is refused.
func TestImage(t *testing.T) {
	s, v := keyPair(t, t.TempDir())
	dir := t.TempDir()
	a, b := filepath.Join(dir, "report.tar"), filepath.Join(dir, "classify.tar")
	ociArchive(t, a, "ghcr.io/auditlens/report:0.1.0", "report layer")
	ociArchive(t, b, "ghcr.io/auditlens/classify:0.1.0", "classify layer")
	img, err := SignImage(s, a)
	if err != nil || img.Repository() != "ghcr.io/auditlens/report" || !strings.HasPrefix(img.Digest, "sha256:") {
		t.Fatalf("sign: %+v %v", img, err)
	}
	if _, err := VerifyImage(v, a); err != nil {
		t.Fatalf("verify: %v", err)
	}
	if _, err := VerifyImage(v, b); err == nil || !strings.Contains(err.Error(), "not signed") {
		t.Errorf("unsigned archive: %v", err)
	}
	// Another image's payload and signature beside classify.tar.
	for _, sfx := range []string{PayloadSuffix, SigSuffix} {
		x, _ := os.ReadFile(a + sfx)
		_ = os.WriteFile(b+sfx, x, 0o644)
	}
	if _, err := VerifyImage(v, b); err == nil || !strings.Contains(err.Error(), "signed ghcr.io/auditlens/report@") {
		t.Errorf("report's signature on classify: %v", err)
	}
	_, other := keyPair(t, t.TempDir())
	if _, err := VerifyImage(other, a); err == nil || !strings.Contains(err.Error(), "the signature does not match") {
		t.Errorf("another key: %v", err)
	}
	// One byte of the layer changed.
	raw, _ := os.ReadFile(a)
	i := bytes.Index(raw, []byte("report layer"))
	raw[i] = 'R'
	_ = os.WriteFile(a, raw, 0o644)
	if _, err := VerifyImage(v, a); err == nil || !strings.Contains(err.Error(), "has sha256") {
		t.Errorf("a changed layer: %v", err)
	}
}

// TestRepositoryKey: the project's public key parses (make verify's default).
func TestRepositoryKey(t *testing.T) {
	if _, err := LoadVerifier("../auditlens-release.pub"); err != nil {
		t.Fatal(err)
	}
}
