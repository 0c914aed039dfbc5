// Command images builds the auditlens OCI images offline, as docker-archive tarballs that
// `docker load`, `kind load image-archive` and `crane push` read: one binary on an empty base
// holding only CA certificates and a passwd entry for the non-root user (time zone data is in
// the binaries, built with -tags timetzdata), plus the glibc loader and the libraries a binary
// names when it is dynamically linked (report and auditlens load libchdb.so with dlopen).
// Every timestamp is SOURCE_DATE_EPOCH, so the same commit gives the same image digests.
//
//	images -repo ../.. -out ../../.bin/images -version 0.1.0 ingest classify report auditlens
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	var c Config
	flag.StringVar(&c.Repository, "repository", "auditlens", "image `name` prefix: images are <repository>/<binary>:<version>")
	flag.StringVar(&c.Version, "version", "", "image tag and org.opencontainers.image.version label (default: the content of deploy/VERSION)")
	flag.StringVar(&c.Revision, "revision", "", "source `commit`, the org.opencontainers.image.revision label (default: git rev-parse HEAD)")
	flag.StringVar(&c.Source, "source", "https://github.com/auditlens/auditlens", "source `URL`, the org.opencontainers.image.source label")
	epoch := flag.String("epoch", os.Getenv("SOURCE_DATE_EPOCH"), "time of every file and of the image, in `seconds` since 1970 (default $SOURCE_DATE_EPOCH, else the commit's time)")
	flag.StringVar(&c.CACerts, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "PEM `file` of CA certificates copied into the images")
	repo := flag.String("repo", ".", "`directory` of the auditlens repository")
	out := flag.String("out", ".bin/images", "`directory` the archives <binary>.tar (and the binaries, in bin/) are written to")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: images [flags] BINARY...   (ingest, classify, report, auditlens)\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		fail(fmt.Errorf("no binary named (ingest, classify, report, auditlens)"))
	}
	if c.Version == "" {
		b, err := os.ReadFile(filepath.Join(*repo, "deploy", "VERSION"))
		if err != nil {
			fail(fmt.Errorf("read the version: %w", err))
		}
		c.Version = strings.TrimSpace(string(b))
	}
	if c.Revision == "" {
		c.Revision = git(*repo, "rev-parse", "HEAD")
	}
	if *epoch == "" {
		*epoch = git(*repo, "log", "-1", "--format=%ct")
	}
	secs, err := strconv.ParseInt(*epoch, 10, 64)
	if err != nil {
		fail(fmt.Errorf("-epoch %q is not a number of seconds", *epoch))
	}
	c.Created = time.Unix(secs, 0).UTC()
	binDir := filepath.Join(*out, "bin")
	for _, name := range flag.Args() {
		bin, err := Build(*repo, name, binDir)
		if err != nil {
			fail(err)
		}
		path := filepath.Join(*out, name+".tar")
		digest, err := c.WriteArchive(path, name, bin)
		if err != nil {
			fail(err)
		}
		fmt.Printf("%s\t%s\t%s\n", path, c.Tag(name), digest)
	}
}

// Build compiles services/<name>/cmd/<name> (or services/auditlens for the all-in-one) into dir
// as the images need it: no cgo, no file paths of this machine, time zone data embedded, no
// symbol tables (the build ID stays, so the same sources give the same bytes).
func Build(repo, name, dir string) (string, error) {
	module := filepath.Join(repo, "services", name)
	if _, err := os.Stat(filepath.Join(module, "cmd", name)); err != nil {
		return "", fmt.Errorf("binary %q: no services/%s/cmd/%s", name, name, name)
	}
	abs, err := filepath.Abs(filepath.Join(dir, name))
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "timetzdata", "-ldflags", "-s -w", "-o", abs, "./cmd/"+name)
	cmd.Dir = module
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOOS=linux", "GOARCH=amd64")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build %s: %w", name, err)
	}
	return abs, nil
}

func git(repo string, args ...string) string {
	out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).Output()
	if err != nil {
		fail(fmt.Errorf("git %s: %w (give the value as a flag)", strings.Join(args, " "), err))
	}
	return strings.TrimSpace(string(out))
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "images: %v\n", err)
	os.Exit(1)
}
