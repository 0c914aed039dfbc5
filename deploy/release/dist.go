package main

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/auditlens/auditlens/deploy/release/deps"
	"github.com/auditlens/auditlens/deploy/release/gobuild"
	"github.com/auditlens/auditlens/deploy/release/sign"
)

// Dist is one release build.
type Dist struct {
	Repo  string
	Out   string // the dist/ directory, emptied first
	Stamp gobuild.Stamp
	// Platforms to ship (default: Platforms).
	Platforms []gobuild.Platform
	// Libchdb is the embedded ClickHouse library shipped in the linux/amd64 archive, of
	// LibchdbVersion (the npm package @chdb/lib-linux-x64-gnu).
	Libchdb, LibchdbVersion string
	// Source is the repository's URL (krew manifest, Homebrew formula, SBOM).
	Source string
	// Download is the URL the archives are downloaded from, ending in /.
	Download string
	Modules  []deps.Module
}

// libchdbPlatform is the only platform libchdb is published for.
var libchdbPlatform = gobuild.Platform{OS: "linux", Arch: "amd64"}

// an entry of an archive.
type entry struct {
	name string // path in the archive
	mode int64
	src  string // file on disk, or
	data []byte
}

// Run builds every binary for every platform, writes the archives, the SBOM, SHA256SUMS, the
// krew manifest and the Homebrew formula into d.Out, and returns the archive names.
func (d Dist) Run() error {
	if len(d.Platforms) == 0 {
		d.Platforms = Platforms
	}
	if _, err := os.Stat(d.Libchdb); err != nil {
		return fmt.Errorf("libchdb for the linux/amd64 archive: %w (run make chdb)", err)
	}
	if err := os.RemoveAll(d.Out); err != nil {
		return err
	}
	build := filepath.Join(d.Out, ".build")
	if err := os.MkdirAll(build, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(build)
	license, err := os.ReadFile(filepath.Join(d.Repo, "LICENSE"))
	if err != nil {
		return fmt.Errorf("read LICENSE: %w", err)
	}
	notice, err := os.ReadFile(filepath.Join(d.Repo, "NOTICE"))
	if err != nil {
		return fmt.Errorf("read NOTICE: %w", err)
	}
	chdbNotice, err := os.ReadFile(filepath.Join(d.Repo, "deploy", "licenses", "libchdb.txt"))
	if err != nil {
		return fmt.Errorf("read libchdb's notices: %w", err)
	}
	var names []string
	for _, p := range d.Platforms {
		dir := filepath.Join(build, p.OS+"_"+p.Arch)
		top := d.base(p)
		entries := []entry{{name: top + "/LICENSE", mode: 0o644, data: license}, {name: top + "/NOTICE", mode: 0o644, data: notice}}
		for _, bin := range gobuild.Binaries {
			path := filepath.Join(dir, bin)
			if err := gobuild.Build(d.Repo, bin, p, d.Stamp, path); err != nil {
				return err
			}
			entries = append(entries, entry{name: top + "/" + bin, mode: 0o755, src: path})
		}
		if p == libchdbPlatform {
			entries = append(entries,
				entry{name: top + "/lib/libchdb.so", mode: 0o755, src: d.Libchdb},
				entry{name: top + "/lib/libchdb-NOTICE.txt", mode: 0o644, data: chdbNotice})
		}
		name := top + ".tar.gz"
		if err := d.archive(filepath.Join(d.Out, name), entries); err != nil {
			return err
		}
		// The krew plugin: classify as kubectl-auditlens, small enough to download for kubectl.
		ktop := d.krewBase(p)
		kname := ktop + ".tar.gz"
		if err := d.archive(filepath.Join(d.Out, kname), []entry{
			{name: ktop + "/LICENSE", mode: 0o644, data: license},
			{name: ktop + "/NOTICE", mode: 0o644, data: notice},
			{name: ktop + "/kubectl-auditlens", mode: 0o755, src: filepath.Join(dir, "classify")},
		}); err != nil {
			return err
		}
		names = append(names, name, kname)
	}
	sbomName := "auditlens_" + d.Stamp.Version + "_sbom.cdx.json"
	libSum, err := sign.FileSHA256(d.Libchdb)
	if err != nil {
		return err
	}
	sbom, err := SBOM(d, libSum)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(d.Out, sbomName), sbom, 0o644); err != nil {
		return err
	}
	names = append(names, sbomName)
	sort.Strings(names)
	sums := map[string]string{}
	var b strings.Builder
	for _, n := range names {
		s, err := sign.FileSHA256(filepath.Join(d.Out, n))
		if err != nil {
			return err
		}
		sums[n] = s
		fmt.Fprintf(&b, "%s  %s\n", s, n)
	}
	if err := os.WriteFile(filepath.Join(d.Out, "SHA256SUMS"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(d.Out, "krew-auditlens.yaml"), []byte(d.Krew(sums)), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(d.Out, "auditlens.rb"), []byte(d.Formula(sums)), 0o644)
}

func (d Dist) base(p gobuild.Platform) string {
	return "auditlens_" + d.Stamp.Version + "_" + p.OS + "_" + p.Arch
}

func (d Dist) krewBase(p gobuild.Platform) string {
	return "kubectl-auditlens_" + d.Stamp.Version + "_" + p.OS + "_" + p.Arch
}

// archive writes a tar.gz whose bytes depend on the entries' contents only: directories
// first, fixed owner and time (the commit's), no gzip name or time.
func (d Dist) archive(path string, entries []entry) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewWriterLevel(f, gzip.DefaultCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(gz)
	mtime := d.Stamp.Date.UTC()
	dirs := map[string]bool{}
	for _, e := range entries {
		for dir := filepath.Dir(e.name); dir != "." && !dirs[dir]; dir = filepath.Dir(dir) {
			dirs[dir] = true
		}
	}
	var dirList []string
	for dir := range dirs {
		dirList = append(dirList, dir)
	}
	sort.Strings(dirList)
	for _, dir := range dirList {
		if err := tw.WriteHeader(header(dir+"/", tar.TypeDir, 0o755, 0, mtime)); err != nil {
			return err
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	for _, e := range entries {
		if err := writeEntry(tw, e, mtime); err != nil {
			return fmt.Errorf("%s: %s: %w", path, e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	return f.Close()
}

func header(name string, typ byte, mode, size int64, mtime time.Time) *tar.Header {
	return &tar.Header{Name: name, Typeflag: typ, Mode: mode, Size: size, ModTime: mtime, Format: tar.FormatUSTAR}
}

func writeEntry(tw *tar.Writer, e entry, mtime time.Time) error {
	if e.src == "" {
		if err := tw.WriteHeader(header(e.name, tar.TypeReg, e.mode, int64(len(e.data)), mtime)); err != nil {
			return err
		}
		_, err := tw.Write(e.data)
		return err
	}
	f, err := os.Open(e.src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(header(e.name, tar.TypeReg, e.mode, st.Size(), mtime)); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}
