package gobuild

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestSharedBuildFlags: make test compiles with the release's flags, or every package is
// compiled twice (once for the tests, once for the release and the images).
func TestSharedBuildFlags(t *testing.T) {
	b, err := os.ReadFile("../../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^TEST_GOFLAGS := (.*)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("the Makefile sets no TEST_GOFLAGS")
	}
	if got, want := string(m[1]), strings.Join(Flags, " "); got != want {
		t.Errorf("Makefile TEST_GOFLAGS = %q, the release builds with %q: make them equal", got, want)
	}
	if !regexp.MustCompile(`(?m)^TEST_ENV := CGO_ENABLED=0 GOFLAGS='\$\(TEST_GOFLAGS\)'$`).Match(b) {
		t.Error("the Makefile's TEST_ENV must build without cgo, with TEST_GOFLAGS, as the release does")
	}
}
