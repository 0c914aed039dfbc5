// Command images builds the auditlens OCI images offline, as docker-archive tarballs that
// `docker load`, `kind load image-archive` and `crane push` read: one binary on an empty base
// holding only CA certificates and a passwd entry for the non-root user (time zone data is in
// the binaries, built with -tags timetzdata), plus the glibc loader and the libraries a binary
// names when it is dynamically linked (report and auditlens load libchdb.so with dlopen).
// Every timestamp is SOURCE_DATE_EPOCH, so the same inputs give the same image digest.
//
//	images -out .bin/images -version 0.1.0 -revision $(git rev-parse HEAD) \
//	  -epoch $(git log -1 --format=%ct) ingest=.bin/images/bin/ingest ...
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	var c Config
	flag.StringVar(&c.Repository, "repository", "auditlens", "image `name` prefix: images are <repository>/<binary>:<version>")
	flag.StringVar(&c.Version, "version", "", "image tag and org.opencontainers.image.version `label` (required)")
	flag.StringVar(&c.Revision, "revision", "", "source `commit`, the org.opencontainers.image.revision label (required)")
	flag.StringVar(&c.Source, "source", "https://github.com/auditlens/auditlens", "source `URL`, the org.opencontainers.image.source label")
	epoch := flag.String("epoch", os.Getenv("SOURCE_DATE_EPOCH"), "creation time of every file and of the image, in `seconds` since 1970 (default $SOURCE_DATE_EPOCH)")
	flag.StringVar(&c.CACerts, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "PEM `file` of CA certificates copied into the images")
	out := flag.String("out", ".bin/images", "`directory` the archives <binary>.tar are written to")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: images [flags] NAME=BINARY...\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	secs, err := strconv.ParseInt(*epoch, 10, 64)
	if err != nil {
		fail(fmt.Errorf("-epoch %q is not a number of seconds (set it or SOURCE_DATE_EPOCH)", *epoch))
	}
	c.Created = time.Unix(secs, 0).UTC()
	if flag.NArg() == 0 {
		fail(fmt.Errorf("no NAME=BINARY given"))
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fail(err)
	}
	for _, arg := range flag.Args() {
		name, bin, ok := strings.Cut(arg, "=")
		if !ok || name == "" || bin == "" {
			fail(fmt.Errorf("argument %q is not NAME=BINARY", arg))
		}
		path := filepath.Join(*out, name+".tar")
		digest, err := c.WriteArchive(path, name, bin)
		if err != nil {
			fail(err)
		}
		fmt.Printf("%s %s %s\n", path, c.Tag(name), digest)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "images: %v\n", err)
	os.Exit(1)
}
