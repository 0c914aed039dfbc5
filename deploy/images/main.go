// Command images builds the auditlens OCI images offline, as OCI archives (an OCI image layout
// in a tar) that podman load, skopeo copy and crane push read: for ingest, classify and report
// an image index with linux/amd64 and linux/arm64, for the all-in-one auditlens linux/amd64
// with libchdb inside. Each image is one binary on an empty base holding only CA certificates
// and a passwd entry for the non-root user (time zone data is in the binaries, built with
// -tags timetzdata), plus the glibc loader and the libraries a binary names when it is
// dynamically linked (report and auditlens load libchdb.so with dlopen; arm64's come from
// Debian's libc6-arm64-cross). Every timestamp is the commit's, so the same commit gives the
// same image digests.
//
//	images -repo ../.. -out ../../.bin/images -registry ghcr.io/auditlens ingest classify report auditlens
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/auditlens/auditlens/deploy/release/gobuild"
)

// Arches are those of the service images; the all-in-one is amd64 only (libchdb is).
var Arches = []string{"amd64", "arm64"}

func main() {
	var c Config
	flag.StringVar(&c.Registry, "registry", "", "registry and namespace `prefix` of every image: <registry>/<binary>:<version> (required; make images sets it)")
	flag.StringVar(&c.Source, "source", "https://github.com/auditlens/auditlens", "source `URL`, the org.opencontainers.image.source label")
	flag.StringVar(&c.CACerts, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "PEM `file` of CA certificates copied into the images")
	flag.StringVar(&c.Libchdb, "libchdb", "", "`path` of libchdb.so, put into the all-in-one image")
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
	if c.Registry == "" {
		fail(fmt.Errorf("-registry is required (e.g. ghcr.io/auditlens)"))
	}
	stamp, err := gobuild.StampOf(*repo)
	if err != nil {
		fail(err)
	}
	c.Version, c.Revision, c.Created = stamp.Version, stamp.Commit, stamp.Date
	c.LibchdbNotice = filepath.Join(*repo, "deploy", "licenses", "libchdb.txt")
	c.Legal = []string{filepath.Join(*repo, "LICENSE"), filepath.Join(*repo, "NOTICE")}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fail(err)
	}
	for _, name := range flag.Args() {
		bins := map[string]string{}
		for _, arch := range archesOf(name) {
			bin := filepath.Join(*out, "bin", "linux_"+arch, name)
			if err := gobuild.Build(*repo, name, gobuild.Platform{OS: "linux", Arch: arch}, stamp, bin); err != nil {
				fail(err)
			}
			bins[arch] = bin
		}
		path := filepath.Join(*out, name+".tar")
		digest, err := c.WriteArchive(path, name, bins)
		if err != nil {
			fail(err)
		}
		fmt.Printf("%s\t%s\t%s\n", path, c.Ref(name), digest)
	}
}

// archesOf is where binary's image is built for.
func archesOf(name string) []string {
	if name == "auditlens" {
		return []string{"amd64"}
	}
	return Arches
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "images: %v\n", err)
	os.Exit(1)
}
