// Package sign signs what a release ships and checks it, with a key pair (the sigstore Go
// libraries; no transparency log, no network): the archives and SHA256SUMS of dist/ as cosign
// sign-blob does (a base64 ECDSA P-256 SHA-256 signature in FILE.sig), a SLSA provenance
// statement for dist/ in a DSSE envelope (provenance.intoto.json), and the OCI image archives
// of .bin/images by the digest of their image index, in cosign's simple-signing payload
// (ARCHIVE.payload.json and ARCHIVE.sig). `cosign verify-blob --key KEY.pub --signature F.sig
// --insecure-ignore-tlog F` checks the blobs as well.
package sign

import (
	"bytes"
	"crypto"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
)

// PasswordEnv holds the password of an encrypted private key (cosign generate-key-pair's
// format); COSIGN_PASSWORD is read when it is unset.
const PasswordEnv = "AUDITLENS_SIGNING_PASSWORD"

// Suffixes of what signing adds beside a file.
const (
	SigSuffix     = ".sig"
	PayloadSuffix = ".payload.json"
	// Provenance is the signed SLSA provenance of dist/ (a DSSE envelope).
	Provenance = "provenance.intoto.json"
)

// LoadSigner reads a PEM private key (PKCS#8, EC, or cosign's encrypted format with the
// password in AUDITLENS_SIGNING_PASSWORD or COSIGN_PASSWORD).
func LoadSigner(path string) (signature.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	pw := os.Getenv(PasswordEnv)
	if pw == "" {
		pw = os.Getenv("COSIGN_PASSWORD")
	}
	key, err := cryptoutils.UnmarshalPEMToPrivateKey(b, cryptoutils.StaticPasswordFunc([]byte(pw)))
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	s, err := signature.LoadSigner(key, crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	return s, nil
}

// LoadVerifier reads a PEM public key.
func LoadVerifier(path string) (signature.Verifier, error) {
	v, err := signature.LoadVerifierFromPEMFile(path, crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("public key %s: %w", path, err)
	}
	return v, nil
}

// GenerateKeyPair returns a new ECDSA P-256 key pair in PEM (the private key unencrypted:
// keep it offline, or encrypt it with cosign).
func GenerateKeyPair() (private, public []byte, err error) {
	return cryptoutils.GeneratePEMEncodedECDSAKeyPair(elliptic.P256(), cryptoutils.SkipPassword)
}

// Blob writes path.sig: the base64 signature of the file's bytes.
func Blob(s signature.Signer, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	sig, err := s.SignMessage(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("sign %s: %w", path, err)
	}
	return os.WriteFile(path+SigSuffix, []byte(base64.StdEncoding.EncodeToString(sig)+"\n"), 0o644)
}

// VerifyBlob checks path against path.sig.
func VerifyBlob(v signature.Verifier, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	sig, err := readSig(path + SigSuffix)
	if err != nil {
		return err
	}
	if err := v.VerifySignature(bytes.NewReader(sig), bytes.NewReader(data)); err != nil {
		return fmt.Errorf("%s: the signature does not match (%w)", filepath.Base(path), err)
	}
	return nil
}

// readSig decodes a base64 signature file.
func readSig(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: not signed (no %s)", strings.TrimSuffix(filepath.Base(path), SigSuffix), filepath.Base(path))
	}
	if err != nil {
		return nil, err
	}
	sig, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("%s: not a base64 signature: %w", filepath.Base(path), err)
	}
	return sig, nil
}

// sumsFile is the checksums file of dist/ (sha256sum's format).
const sumsFile = "SHA256SUMS"

// readSums parses SHA256SUMS: file name to hex digest.
func readSums(dir string) (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, sumsFile))
	if err != nil {
		return nil, err
	}
	sums := map[string]string{}
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != 64 || name == "" || strings.ContainsAny(name, "/\\") || name == "." || name == ".." {
			return nil, fmt.Errorf("%s line %d: not \"<sha256>  <file>\"", sumsFile, i+1)
		}
		sums[name] = sum
	}
	return sums, nil
}

// FileSHA256 is the hex SHA-256 of a file (SHA256SUMS's lines).
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
