package kubeapiserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBinaryTakesTheNodeBuild: with the node's six binaries in the cache, Binary hands out
// that build's apiserver and builds nothing (CI builds only the node's, once).
func TestBinaryTakesTheNodeBuild(t *testing.T) {
	t.Setenv("AUDITLENS_KUBE_APISERVER", "")
	t.Setenv("AUDITLENS_CACHE_DIR", t.TempDir())
	node := cacheDir("kubernetes", linkFlags())
	if err := os.MkdirAll(node, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range NodeCommands {
		if err := os.WriteFile(filepath.Join(node, c), []byte("#!/bin/true\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(node, "kube-apiserver"); got != want {
		t.Fatalf("Binary() = %s, want the node build's %s", got, want)
	}
	if _, err := os.Stat(cacheDir("kube-apiserver", linkFlags())); !os.IsNotExist(err) {
		t.Fatalf("Binary built the apiserver alone beside the node build: %v", err)
	}
}

// TestLinkFlagsStripAndStamp: the binaries name Version and carry no DWARF or symbol table.
func TestLinkFlagsStripAndStamp(t *testing.T) {
	f := linkFlags()
	for _, want := range []string{"-s -w ", "k8s.io/component-base/version.gitVersion=" + Version} {
		if !strings.Contains(f, want) {
			t.Errorf("linkFlags() = %q, lacks %q", f, want)
		}
	}
}
