package tail

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// Opening files: the first one (the checkpointed file, or per StartAt) and any later one.

// openSibling opens a rotated sibling at off, or its compressed form when it was compressed
// since it was listed.
func openSibling(s sibling, off int64) (*source, error) {
	src, err := openSource(s.path, s.gz, off)
	if errors.Is(err, fs.ErrNotExist) && !s.gz {
		src, err = openSource(s.path+".gz", true, off)
	}
	return src, err
}

// openSource opens path (gunzipping when gz) positioned at off, with its identity.
func openSource(path string, gz bool, off int64) (*source, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	s := &source{name: path, f: f, r: f, gz: gz, off: off, size: fi.Size()}
	s.id.Path = path
	s.id.Dev, s.id.Ino = devIno(fi)
	var head []byte
	if gz {
		head, err = readHead(path, true)
		if err != nil {
			f.Close()
			return nil, err
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("gunzip %s: %w", path, err)
		}
		s.r = zr
		if off > 0 {
			if _, err := io.CopyN(io.Discard, zr, off); err != nil {
				f.Close()
				return nil, fmt.Errorf("gunzip %s to offset %d: %w", path, off, err)
			}
		}
	} else {
		head, err = preadHead(f)
		if err != nil {
			f.Close()
			return nil, err
		}
		if off > 0 {
			if _, err := f.Seek(off, io.SeekStart); err != nil {
				f.Close()
				return nil, err
			}
		}
	}
	s.id.Fingerprint, s.id.FingerprintLen = Fingerprint(head)
	return s, nil
}

// open picks the first file: the checkpointed one, or per StartAt.
func (t *Follower) open() (bool, error) {
	if t.start != nil {
		return t.resume(*t.start)
	}
	switch t.cfg.StartAt {
	case StartEnd:
		src, err := openSource(t.cfg.Path, false, 0)
		if errors.Is(err, fs.ErrNotExist) {
			// Everything in a file created after the start is new: read it all, but
			// not the rotated siblings that may exist.
			t.waitedForActive = true
			return false, nil
		}
		if err != nil {
			return false, err // an *fs.PathError: it names the operation and the file already
		}
		end, err := lastLineEnd(src.f, src.size)
		if t.waitedForActive {
			end = 0
		}
		if err != nil {
			src.f.Close()
			return false, err
		}
		if _, err := src.f.Seek(end, io.SeekStart); err != nil {
			src.f.Close()
			return false, err
		}
		src.off, src.seen = end, time.Now()
		t.cur = src
		t.cfg.Logger.Info("no checkpoint: starting at the end of the audit log", "path", t.cfg.Path, "offset", end)
		return true, nil
	default:
		src, err := t.nextAfter(File{}, time.Time{}.Add(1), time.Time{})
		if err != nil || src == nil {
			return false, err
		}
		t.cur = src
		t.cfg.Logger.Info("no checkpoint: starting at the beginning", "path", src.name)
		return true, nil
	}
}

// resume finds the checkpointed file among the active file and its rotated siblings.
func (t *Follower) resume(p Position) (bool, error) {
	type cand struct {
		path    string
		gz      bool
		rotated time.Time
		dev     uint64
		ino     uint64
		size    int64
	}
	var cands []cand
	if fi, err := os.Stat(t.cfg.Path); err == nil {
		d, i := devIno(fi)
		cands = append(cands, cand{path: t.cfg.Path, dev: d, ino: i, size: fi.Size()})
	}
	sibs, err := listRotated(t.cfg.Path)
	if err != nil {
		return false, err
	}
	for i := len(sibs) - 1; i >= 0; i-- {
		s := sibs[i]
		cands = append(cands, cand{path: s.path, gz: s.gz, rotated: s.ts, dev: s.dev, ino: s.ino, size: s.size})
	}
	// Prefer the same inode with the same head; then a copy with the same head.
	var found *cand
	for pass := 0; pass < 2 && found == nil; pass++ {
		for i := range cands {
			c := cands[i]
			sib := sibling{path: c.path, gz: c.gz, dev: c.dev, ino: c.ino}
			if !sib.matches(p.File, pass == 0) {
				continue
			}
			if !c.gz && c.size < p.Offset {
				continue
			}
			found = &cands[i]
			break
		}
	}
	if found == nil {
		t.cfg.Logger.Warn("checkpointed audit log not found (removed or rotated away); continuing with the files rotated after it",
			"checkpoint_file", p.File.Path, "offset", p.Offset)
		src, err := t.nextAfter(p.File, p.Rotated, p.SeenActive)
		if err != nil || src == nil {
			return false, err
		}
		t.cur = src
		t.start = nil
		return true, nil
	}
	src, err := openSource(found.path, found.gz, p.Offset)
	if err != nil {
		return false, fmt.Errorf("resume %s at %d: %w", found.path, p.Offset, err)
	}
	if !found.rotated.IsZero() {
		src.final, src.rotated = true, found.rotated
	} else {
		src.seen = time.Now()
	}
	t.cur = src
	t.start = nil
	t.cfg.Logger.Info("resuming from checkpoint", "path", found.path, "offset", p.Offset)
	return true, nil
}

// lastLineEnd returns the offset after the last newline before size.
func lastLineEnd(f *os.File, size int64) (int64, error) {
	buf := make([]byte, 64<<10)
	for end := size; end > 0; {
		start := max(0, end-int64(len(buf)))
		n, err := f.ReadAt(buf[:end-start], start)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return start + int64(i) + 1, nil
		}
		end = start
	}
	return 0, nil
}
