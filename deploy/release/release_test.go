package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	cdx "github.com/CycloneDX/cyclonedx-go"

	"github.com/auditlens/auditlens/deploy/release/deps"
	"github.com/auditlens/auditlens/deploy/release/gobuild"
)

var update = flag.Bool("update", false, "rewrite NOTICE from the module graph")

const repo = "../.."

var (
	modsOnce sync.Once
	mods     []deps.Module
	errMods  error
)

func moduleGraph(t *testing.T) []deps.Module {
	t.Helper()
	modsOnce.Do(func() { mods, errMods = modules(repo) })
	if errMods != nil {
		t.Fatal(errMods)
	}
	return mods
}

// TestNotice: NOTICE is what the module graph of the shipped binaries gives, so a new
// dependency (or a new version) without its entry fails here; one whose licence cannot be
// told fails in modules() with its name.
func TestNotice(t *testing.T) {
	want := Notice(moduleGraph(t))
	if *update {
		if err := os.WriteFile(filepath.Join(repo, "NOTICE"), []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	have, err := os.ReadFile(filepath.Join(repo, "NOTICE"))
	if err != nil {
		t.Fatal(err)
	}
	if string(have) != want {
		t.Fatal("NOTICE is stale for the module graph: run make notice and commit it")
	}
	for _, m := range moduleGraph(t) {
		if !m.Own && !strings.Contains(want, "\n"+m.Path+" "+m.Version+": ") {
			t.Errorf("NOTICE lacks %s %s", m.Path, m.Version)
		}
	}
}

// A module without a licence file is refused by name, not listed without a licence.
func TestModuleWithoutLicence(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte("no licence here"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := deps.Module{Path: "example.com/x", Version: "v1.0.0"}
	if err := deps.ReadLicenses(&m, dir); err != nil || len(m.Licenses) != 0 {
		t.Fatalf("licences %v, err %v", m.Licenses, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "LICENSE"), []byte(mitText), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := deps.ReadLicenses(&m, dir); err != nil || !slices.Equal(m.Licenses, []string{"MIT"}) {
		t.Fatalf("licences %v, err %v, want MIT", m.Licenses, err)
	}
}

const mitText = `Copyright (c) 2026 Someone

Permission is hereby granted, free of charge, to any person obtaining a copy of this software and associated documentation files (the "Software"), to deal in the Software without restriction, including without limitation the rights to use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
`

// TestDist runs the release twice: the same checksums, the four platforms, an SBOM naming
// every module and libchdb, a classify that names deploy/VERSION, krew and Homebrew files
// carrying the checksums.
func TestDist(t *testing.T) {
	lib := os.Getenv("CHDB_LIB_PATH")
	if lib == "" {
		lib = filepath.Join(repo, ".cache", "chdb", "libchdb.so")
	}
	if _, err := os.Stat(lib); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("libchdb is required in CI: %v", err)
		}
		t.Skipf("libchdb unavailable (make chdb), skipping the release build: %v", err)
	}
	stamp, err := gobuild.StampOf(repo)
	if err != nil {
		t.Fatal(err)
	}
	d := Dist{Repo: repo, Stamp: stamp, Libchdb: lib, LibchdbVersion: "26.7.3-stable.1", Source: "https://github.com/auditlens/auditlens",
		Download: "https://github.com/auditlens/auditlens/releases/download/v" + stamp.Version + "/", Modules: moduleGraph(t)}
	var sums [2]string
	var dirs [2]string
	for i := range 2 {
		d.Out = filepath.Join(t.TempDir(), "dist")
		dirs[i] = d.Out
		if err := d.Run(); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(d.Out, "SHA256SUMS"))
		if err != nil {
			t.Fatal(err)
		}
		sums[i] = string(b)
	}
	t.Logf("SHA256SUMS:\n%s", sums[0])
	if sums[0] != sums[1] {
		t.Fatalf("two release builds differ:\n%s\n%s", sums[0], sums[1])
	}
	out := dirs[0]
	v := stamp.Version
	for _, p := range Platforms {
		name := "auditlens_" + v + "_" + p.OS + "_" + p.Arch + ".tar.gz"
		if !strings.Contains(sums[0], "  "+name+"\n") || !strings.Contains(sums[0], "  kubectl-auditlens_"+v+"_"+p.OS+"_"+p.Arch+".tar.gz\n") {
			t.Errorf("SHA256SUMS lacks %s or its krew archive", name)
		}
		files := list(t, filepath.Join(out, name))
		top := strings.TrimSuffix(name, ".tar.gz") + "/"
		want := []string{top + "LICENSE", top + "NOTICE", top + "auditlens", top + "classify", top + "ingest", top + "report"}
		if p == libchdbPlatform {
			want = append(want, top+"lib/libchdb-NOTICE.txt", top+"lib/libchdb.so")
		}
		var got []string
		for f := range files {
			if !strings.HasSuffix(f, "/") {
				got = append(got, f)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s holds %v, want %v", name, got, want)
		}
		for _, bin := range gobuild.Binaries {
			if !isELFOrMachO(files[top+bin], p) {
				t.Errorf("%s: %s is not a %s executable", name, bin, p)
			}
		}
		if p.OS == runtime.GOOS && p.Arch == runtime.GOARCH {
			dir := t.TempDir()
			bin := filepath.Join(dir, "classify")
			if err := os.WriteFile(bin, files[top+"classify"], 0o755); err != nil {
				t.Fatal(err)
			}
			b, err := exec.Command(bin, "--version").Output()
			if err != nil || !strings.HasPrefix(string(b), "classify "+v+"\ncommit: "+stamp.Commit+"\n") {
				t.Errorf("classify --version: %v\n%s", err, b)
			}
		}
	}
	// The SBOM: CycloneDX JSON with every module and libchdb.
	f, err := os.Open(filepath.Join(out, "auditlens_"+v+"_sbom.cdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var bom cdx.BOM
	if err := cdx.NewBOMDecoder(f, cdx.BOMFileFormatJSON).Decode(&bom); err != nil {
		t.Fatal(err)
	}
	inBOM := map[string]bool{}
	for _, c := range *bom.Components {
		inBOM[c.PackageURL] = true
	}
	for _, m := range moduleGraph(t) {
		version := m.Version
		if m.Own {
			version = v
		}
		if !inBOM["pkg:golang/"+m.Path+"@"+version] {
			t.Errorf("SBOM lacks %s %s", m.Path, version)
		}
	}
	if !inBOM["pkg:npm/%40chdb/lib-linux-x64-gnu@26.7.3-stable.1"] || bom.Metadata.Component.Version != v {
		t.Errorf("SBOM lacks libchdb or auditlens %s", v)
	}
	// krew and Homebrew carry the checksums of what they download.
	krew, _ := os.ReadFile(filepath.Join(out, "krew-auditlens.yaml"))
	brew, _ := os.ReadFile(filepath.Join(out, "auditlens.rb"))
	for _, line := range strings.Split(strings.TrimSpace(sums[0]), "\n") {
		sum, name, _ := strings.Cut(line, "  ")
		switch {
		case strings.HasPrefix(name, "kubectl-auditlens_"):
			if !bytes.Contains(krew, []byte(name+"\n    sha256: "+sum+"\n")) {
				t.Errorf("krew manifest lacks %s with its checksum", name)
			}
		case strings.HasSuffix(name, ".tar.gz"):
			if !bytes.Contains(brew, []byte(name+"\"\n      sha256 \""+sum+"\"")) {
				t.Errorf("Homebrew formula lacks %s with its checksum", name)
			}
		}
	}
	// make release SIGNING_KEY=... then make verify: the real dist signed with a key made
	// here (the project's private key is kept offline), checked with its public half; the
	// repository's public key does not verify it.
	keys := t.TempDir()
	if err := run([]string{"keygen", "-out", keys}); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"sign", "-repo", repo, "-key", filepath.Join(keys, "auditlens-release.key"), "-dist", out, "-libchdb-version", "26.7.3-stable.1"}); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"verify", "-repo", repo, "-key", filepath.Join(keys, "auditlens-release.pub"), "-dist", out}); err != nil {
		t.Errorf("verify the signed release: %v", err)
	}
	if err := run([]string{"verify", "-repo", repo, "-dist", out}); err == nil || !strings.Contains(err.Error(), "SHA256SUMS: the signature does not match") {
		t.Errorf("verify with the repository's key: %v, want a signature mismatch", err)
	}
}

// TestSBOM: the bill of materials names auditlens, every module (own ones at the release's
// version) with its licences, and libchdb with its hash, as CycloneDX JSON.
func TestSBOM(t *testing.T) {
	d := Dist{Stamp: gobuild.Stamp{Version: "1.2.3", Commit: "0123456789abcdef0123456789abcdef01234567"}, LibchdbVersion: "26.7.3-stable.1",
		Source: "https://github.com/auditlens/auditlens", Modules: []deps.Module{
			{Path: "github.com/auditlens/auditlens/lib", Own: true, Binaries: []string{"classify"}},
			{Path: "golang.org/x/sys", Version: "v0.49.0", Licenses: []string{"BSD-3-Clause"}, Sum: "h1:x", Binaries: []string{"classify", "ingest"}},
		}}
	b, err := SBOM(d, "ab12")
	if err != nil {
		t.Fatal(err)
	}
	var bom cdx.BOM
	if err := cdx.NewBOMDecoder(bytes.NewReader(b), cdx.BOMFileFormatJSON).Decode(&bom); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range *bom.Components {
		var lic []string
		if c.Licenses != nil {
			for _, l := range *c.Licenses {
				lic = append(lic, l.License.ID)
			}
		}
		got[c.PackageURL] = strings.Join(lic, ",")
	}
	want := map[string]string{"pkg:golang/github.com/auditlens/auditlens/lib@1.2.3": "Apache-2.0", "pkg:golang/golang.org/x/sys@v0.49.0": "BSD-3-Clause",
		"pkg:npm/%40chdb/lib-linux-x64-gnu@26.7.3-stable.1": "Apache-2.0"}
	if len(got) != len(want) {
		t.Errorf("components %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("component %s: licences %q, want %q", k, got[k], v)
		}
	}
	if bom.Metadata.Component.Version != "1.2.3" || !strings.HasPrefix(bom.SerialNumber, "urn:uuid:") || len(bom.SerialNumber) != 45 {
		t.Errorf("metadata %+v, serial %s", bom.Metadata.Component, bom.SerialNumber)
	}
	again, _ := SBOM(d, "ab12")
	if !bytes.Equal(b, again) {
		t.Error("two SBOMs of the same release differ")
	}
}

// list reads a tar.gz into memory (name -> content).
func list(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Uname != "" {
			t.Errorf("%s: %s owned by %d %q", path, h.Name, h.Uid, h.Uname)
		}
		if h.Typeflag == tar.TypeReg && strings.HasSuffix(h.Name, "libchdb.so") {
			n, _ := io.Copy(io.Discard, tr)
			files[h.Name] = make([]byte, 0, n)
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = b
	}
}

// isELFOrMachO checks the executable header's format and machine against p.
func isELFOrMachO(b []byte, p gobuild.Platform) bool {
	if len(b) < 20 {
		return false
	}
	switch p.OS {
	case "linux":
		machine := uint16(b[18]) | uint16(b[19])<<8
		return bytes.HasPrefix(b, []byte("\x7fELF")) && (p.Arch == "amd64" && machine == 62 || p.Arch == "arm64" && machine == 183)
	case "darwin":
		cpu := uint32(b[4]) | uint32(b[5])<<8 | uint32(b[6])<<16 | uint32(b[7])<<24
		return bytes.HasPrefix(b, []byte{0xcf, 0xfa, 0xed, 0xfe}) && (p.Arch == "amd64" && cpu == 0x01000007 || p.Arch == "arm64" && cpu == 0x0100000c)
	}
	return false
}
