// Command catalogue generates the API section of the classify rule catalogue from the
// prerelease lifecycle data of k8s.io/api, k8s.io/apiextensions-apiserver and
// k8s.io/kube-aggregator over many module versions, plus a small hand overlay.
//
//	go run . -out ../../services/classify/rules/apis.generated.yaml          (make catalogue)
//	go run . -out ../../services/classify/rules/apis.generated.yaml -check   (make catalogue-check)
//
// The module sources come from the module cache through the Go module proxy
// (`go mod download -json`); they are parsed, never imported or vendored.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
)

func main() {
	modules := flag.String("modules", "modules.txt", "the module versions to read")
	overlayFile := flag.String("overlay", "overlay.yaml", "hand-written rows and replacements, each with its source")
	out := flag.String("out", "", "the generated catalogue file to write")
	check := flag.Bool("check", false, "do not write: fail when the file differs from what would be generated")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "catalogue: -out is required: the generated catalogue file")
		os.Exit(2)
	}
	if err := run(*modules, *overlayFile, *out, *check); err != nil {
		fmt.Fprintf(os.Stderr, "catalogue: %v\n", err)
		os.Exit(1)
	}
}

func run(modulesFile, overlayFile, out string, check bool) error {
	mods, err := readModules(modulesFile)
	if err != nil {
		return err
	}
	ov, err := readOverlay(overlayFile)
	if err != nil {
		return err
	}
	dirs, err := download(mods)
	if err != nil {
		return err
	}
	all, err := union(mods, dirs)
	if err != nil {
		return err
	}
	c, err := build(all, newestRelease(mods), ov)
	if err != nil {
		return err
	}
	if len(c.Unresolved) > 0 {
		return fmt.Errorf("no replacement served today for %v: add one to the overlay (or say none exists there)", c.Unresolved)
	}
	var buf bytes.Buffer
	if err := c.write(&buf, mods); err != nil {
		return err
	}
	if check {
		old, err := os.ReadFile(out)
		if err != nil {
			return fmt.Errorf("read %s: %w", out, err)
		}
		if !bytes.Equal(old, buf.Bytes()) {
			return fmt.Errorf("%s is stale: run make catalogue and commit the result", out)
		}
		return nil
	}
	fmt.Fprintf(os.Stderr, "catalogue: %d APIs (%d removal releases), %d body kinds, %d served resources -> %s\n",
		len(c.APIs), countRemoved(c.APIs), len(c.BodyKinds), len(c.Served), out)
	return os.WriteFile(out, buf.Bytes(), 0o644)
}

func countRemoved(rows []Row) int {
	n := 0
	for _, r := range rows {
		if !r.RemovedIn.IsZero() {
			n++
		}
	}
	return n
}
