package tail

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RotationTimeFormat is the timestamp the apiserver's log rotation (lumberjack) puts in the
// name of a rotated file: audit.log becomes audit-2006-01-02T15-04-05.000.log, and
// audit-2006-01-02T15-04-05.000.log.gz with --audit-log-compress.
const RotationTimeFormat = "2006-01-02T15-04-05.000"

// RotatedName is the name the apiserver gives active when it rotates it at t.
func RotatedName(active string, t time.Time) string {
	dir, base := filepath.Split(active)
	ext := filepath.Ext(base)
	return filepath.Join(dir, strings.TrimSuffix(base, ext)+"-"+t.UTC().Format(RotationTimeFormat)+ext)
}

// sibling is a rotated file of the active log.
type sibling struct {
	path string
	ts   time.Time
	num  int // logrotate's number (audit.log.N), 0 otherwise
	gz   bool
	size int64
	dev  uint64
	ino  uint64
}

// listRotated returns the rotated siblings of active, oldest first. When a file exists both
// plain and compressed (compression in progress), only the plain one is listed.
//
// Three namings are recognised: the apiserver's own rotation (lumberjack:
// audit-2006-01-02T15-04-05.000.log[.gz], the time in the name) and logrotate's, numbered
// (audit.log.1, audit.log.2.gz, ...) or with dateext (audit.log-20261130[.gz]); logrotate's
// names say nothing exact about the rotation time, so their modification time stands for it
// (renames and gzip keep it). Files are recognised by content wherever they moved, so
// logrotate renumbering them at every rotation does not matter.
func listRotated(active string) ([]sibling, error) {
	dir, base := filepath.Split(active)
	if dir == "" {
		dir = "."
	}
	ext := filepath.Ext(base)
	prefix := strings.TrimSuffix(base, ext) + "-"
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	byName := map[string]sibling{} // by name without .gz
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || name == base {
			continue
		}
		plain, gz := strings.CutSuffix(name, ".gz")
		var ts time.Time
		var num int
		switch {
		case strings.HasPrefix(plain, prefix) && strings.HasSuffix(plain, ext):
			t, err := time.ParseInLocation(RotationTimeFormat, strings.TrimSuffix(strings.TrimPrefix(plain, prefix), ext), time.UTC)
			if err != nil {
				continue
			}
			ts = t
		case strings.HasPrefix(plain, base+".") && allDigits(plain[len(base)+1:]):
			num, _ = strconv.Atoi(plain[len(base)+1:])
		case strings.HasPrefix(plain, base+"-") && allDigits(plain[len(base)+1:]):
		default:
			continue
		}
		s := sibling{path: filepath.Join(dir, name), ts: ts, gz: gz, num: num}
		fi, err := os.Stat(s.path)
		if err != nil {
			continue // removed meanwhile
		}
		if s.ts.IsZero() {
			s.ts = fi.ModTime().UTC()
		}
		s.size = fi.Size()
		s.dev, s.ino = devIno(fi)
		if prev, ok := byName[plain]; ok && !prev.gz {
			continue
		}
		byName[plain] = s
	}
	out := make([]sibling, 0, len(byName))
	for _, s := range byName {
		out = append(out, s)
	}
	// Oldest first; logrotate's higher numbers are older when times tie.
	sort.Slice(out, func(i, j int) bool {
		if !out[i].ts.Equal(out[j].ts) {
			return out[i].ts.Before(out[j].ts)
		}
		return out[i].num > out[j].num
	})
	return out, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func devIno(fi fs.FileInfo) (uint64, uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev), uint64(st.Ino) //nolint:unconvert // Dev is int32 on some platforms
	}
	return 0, 0
}

// readHead returns up to FingerprintSize leading bytes of the (decompressed) file.
func readHead(path string, gz bool) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if gz {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("gunzip %s: %w", path, err)
		}
		r = zr
	}
	buf := make([]byte, FingerprintSize)
	n, err := io.ReadFull(r, buf)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, err
	}
	return buf[:n], nil
}

// preadHead reads up to FingerprintSize leading bytes of an open plain file.
func preadHead(f *os.File) ([]byte, error) {
	buf := make([]byte, FingerprintSize)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf[:n], nil
}

// matches reports whether sibling s holds the file id: the same inode with the same first
// bytes, or (copy or compression) a different file with the same first bytes.
func (s sibling) matches(id File, sameInodeOnly bool) bool {
	same := !s.gz && s.dev == id.Dev && s.ino == id.Ino
	if sameInodeOnly && !same {
		return false
	}
	if id.FingerprintLen == 0 {
		return same
	}
	head, err := readHead(s.path, s.gz)
	if errors.Is(err, fs.ErrNotExist) && !s.gz {
		head, err = readHead(s.path+".gz", true) // compressed since it was listed
	}
	if err != nil {
		return false
	}
	return id.SameContent(head)
}
