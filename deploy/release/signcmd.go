package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/auditlens/auditlens/deploy/release/gobuild"
	"github.com/auditlens/auditlens/deploy/release/sign"
)

// PublicKey is the project's release key, relative to the repository: what make verify checks
// against unless told otherwise. Its private half is kept offline by the maintainers.
const PublicKey = "deploy/release/auditlens-release.pub"

// runSign runs the signing commands:
//
//	release keygen -out DIR                         a new key pair: DIR/auditlens-release.key and .pub
//	release sign -key KEY [-dist DIR] [-images DIR] sign dist/ (archives, SHA256SUMS, provenance) and the image archives
//	release verify [-key PUB] [-dist DIR] [-images DIR]
func runSign(args []string) error {
	fs := flag.NewFlagSet("release "+args[0], flag.ContinueOnError)
	repo := fs.String("repo", "../..", "`directory` of the auditlens repository")
	key := fs.String("key", "", "the private key (sign; PEM, PKCS#8 or cosign's encrypted format with $"+sign.PasswordEnv+") or the public key (verify; default: the repository's "+PublicKey+")")
	dist := fs.String("dist", "", "the release `directory` (make release's dist/)")
	images := fs.String("images", "", "the `directory` of the image archives (make images's .bin/images)")
	source := fs.String("source", "https://github.com/auditlens/auditlens", "the repository's `URL` (sign: the provenance)")
	libchdb := fs.String("libchdb-version", "", "`version` of libchdb in the linux/amd64 archive (sign: the provenance)")
	out := fs.String("out", "", "keygen: the `directory` the key pair is written to")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch args[0] {
	case "keygen":
		if *out == "" {
			return errors.New("keygen: -out is required")
		}
		priv, pub, err := sign.GenerateKeyPair()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(*out, "auditlens-release.key"), priv, 0o600); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(*out, "auditlens-release.pub"), pub, 0o644)
	case "sign":
		if *key == "" {
			return errors.New("sign: -key is required (the release's private key)")
		}
		if *dist == "" && *images == "" {
			return errors.New("sign: give -dist, -images or both")
		}
		s, err := sign.LoadSigner(*key)
		if err != nil {
			return err
		}
		if *dist != "" {
			st, err := gobuild.StampOf(*repo)
			if err != nil {
				return err
			}
			b := sign.Build{Source: *source, Commit: st.Commit, Version: st.Version, Command: "make release", GoVersion: runtime.Version()}
			if *libchdb != "" {
				b.Dependencies = map[string]string{"pkg:npm/%40chdb/lib-linux-x64-gnu": *libchdb}
			}
			if err := sign.Dist(s, *dist, b); err != nil {
				return err
			}
			fmt.Printf("signed %s: every file of SHA256SUMS, SHA256SUMS, %s\n", *dist, sign.Provenance)
		}
		return forImages(*images, func(archive string) error {
			img, err := sign.SignImage(s, archive)
			if err == nil {
				fmt.Printf("signed %s: %s@%s\n", filepath.Base(archive), img.Repository(), img.Digest)
			}
			return err
		})
	case "verify":
		if *key == "" {
			*key = filepath.Join(*repo, PublicKey)
		}
		if *dist == "" && *images == "" {
			return errors.New("verify: give -dist, -images or both")
		}
		v, err := sign.LoadVerifier(*key)
		if err != nil {
			return err
		}
		if *dist != "" {
			files, err := sign.VerifyDist(v, *dist)
			if err != nil {
				return fmt.Errorf("%s: %w", *dist, err)
			}
			fmt.Printf("verified %s with %s: %d files (%s)\n", *dist, *key, len(files), strings.Join(files, ", "))
		}
		return forImages(*images, func(archive string) error {
			img, err := sign.VerifyImage(v, archive)
			if err == nil {
				fmt.Printf("verified %s with %s: %s@%s\n", filepath.Base(archive), *key, img.Repository(), img.Digest)
			}
			return err
		})
	}
	return errors.New(usage)
}

// forImages runs f on every image archive (*.tar) of dir; none there is an error.
func forImages(dir string, f func(string) error) error {
	if dir == "" {
		return nil
	}
	archives, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	if err != nil {
		return err
	}
	if len(archives) == 0 {
		return fmt.Errorf("%s: no image archive (*.tar): make images", dir)
	}
	sort.Strings(archives)
	for _, a := range archives {
		if err := f(a); err != nil {
			return err
		}
	}
	return nil
}
