package tail

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// Rotation: the active file renamed away, replaced, truncated (copytruncate) or copied while
// empty, and moving on from a finished file to the next.

// headUnchanged checks the active file still starts with the fingerprinted bytes, growing
// the fingerprint while the file is shorter than FingerprintSize.
func (t *Follower) headUnchanged() (bool, error) {
	id := &t.cur.id
	if id.FingerprintLen == FingerprintSize {
		head := make([]byte, FingerprintSize)
		n, err := t.cur.f.ReadAt(head, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return false, fmt.Errorf("read %s: %w", t.cur.name, err)
		}
		return id.SameContent(head[:n]), nil
	}
	head, err := preadHead(t.cur.f)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", t.cur.name, err)
	}
	if !id.SameContent(head) {
		return false, nil
	}
	id.Fingerprint, id.FingerprintLen = Fingerprint(head)
	return true, nil
}

// copiedWhileEmpty handles an active file that was empty when opened and has content now:
// when a sibling was rotated since, that content was copied there and truncated
// (copytruncate) before this read; read the sibling first.
func (t *Follower) copiedWhileEmpty() (bool, error) {
	c := t.cur
	if c.opened.IsZero() {
		return false, nil
	}
	sibs, err := listRotated(t.cfg.Path)
	if err != nil {
		return false, err
	}
	// When this file itself was renamed away since (lumberjack), only siblings rotated
	// before that can hold copies of its earlier content.
	var until time.Time
	for _, s := range sibs {
		if !s.gz && s.dev == c.id.Dev && s.ino == c.id.Ino {
			until = s.ts
		}
	}
	from := c.opened.UTC().Truncate(time.Millisecond)
	for _, s := range sibs {
		if s.ts.Before(from) || (!until.IsZero() && !s.ts.Before(until)) {
			continue
		}
		if (!s.gz && s.dev == c.id.Dev && s.ino == c.id.Ino) || s.matches(c.prev, false) {
			continue
		}
		src, err := openSibling(s, 0)
		if err != nil {
			return false, err
		}
		src.final, src.rotated = true, s.ts
		t.cfg.Logger.Info("audit log was copied and truncated before it was read; reading the copy", "path", c.name, "copy", s.path)
		c.f.Close()
		t.cur = src
		t.resetBuffer()
		return true, nil
	}
	return false, nil
}

// copyInProgress reports whether the rotated plain file being read is a copy still being
// made (copytruncate): the active file, a different one, still starts like it, so the
// truncation that ends the copy has not happened yet.
func (t *Follower) copyInProgress() bool {
	c := t.cur
	if c.gz || c.rotated.IsZero() {
		return false
	}
	head, err := preadHead(c.f)
	if err != nil {
		return false
	}
	if len(head) == 0 {
		fi, err := c.f.Stat()
		return err == nil && time.Since(fi.ModTime()) < time.Second
	}
	a, err := os.Open(t.cfg.Path)
	if err != nil {
		return false
	}
	defer a.Close()
	afi, err := a.Stat()
	if err != nil {
		return false
	}
	if dev, ino := devIno(afi); dev == c.id.Dev && ino == c.id.Ino {
		return false
	}
	ahead, err := preadHead(a)
	return err == nil && len(ahead) >= len(head) && bytes.Equal(ahead[:len(head)], head)
}

// check looks at the active file at EOF: truncated, rotated away, or just idle.
func (t *Follower) check() (bool, error) {
	c := t.cur
	fi, err := c.f.Stat()
	if err != nil {
		return false, fmt.Errorf("stat %s: %w", c.name, err)
	}
	c.size = fi.Size()
	readPos := c.off + int64(t.hi-t.lo)
	if c.size < readPos {
		return true, t.truncated()
	}
	if c.size > readPos {
		return true, nil // grew since the read
	}
	now := time.Now()
	pfi, err := os.Stat(t.cfg.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Deleted while open: keep reading the open file until a new one appears.
		if !c.gone {
			t.cfg.Logger.Warn("audit log removed; reading the open file until a new one appears", "path", c.name)
			c.gone = true
		}
		return false, nil
	case err != nil:
		return false, fmt.Errorf("stat %s: %w", t.cfg.Path, err)
	}
	dev, ino := devIno(pfi)
	if dev == c.id.Dev && ino == c.id.Ino {
		c.seen = now
		c.gone = false
		return false, nil
	}
	// Rotated (renamed away or replaced): drain the open file, then move on.
	c.final = true
	t.Stats.Rotations.Add(1)
	if sibs, err := listRotated(t.cfg.Path); err == nil {
		for _, s := range sibs {
			if s.matches(c.id, !s.gz) {
				c.rotated = s.ts
				c.name = s.path
				break
			}
		}
	}
	t.cfg.Logger.Info("audit log rotated", "path", t.cfg.Path, "now", c.name, "offset", c.off)
	return true, nil
}

// truncated handles an active file that became shorter than what was read, or whose first
// bytes changed. With copytruncate the old content is in a rotated copy: finish it there.
func (t *Follower) truncated() error {
	c := t.cur
	t.Stats.Truncations.Add(1)
	t.resetBuffer()
	if c.id.FingerprintLen > 0 {
		sibs, err := listRotated(t.cfg.Path)
		if err != nil {
			return err
		}
		for i := len(sibs) - 1; i >= 0; i-- {
			s := sibs[i]
			if (!s.gz && s.dev == c.id.Dev && s.ino == c.id.Ino) || (!s.gz && s.size < c.off) {
				continue
			}
			if !s.matches(c.id, false) {
				continue
			}
			t.cfg.Logger.Info("audit log truncated; finishing its copy", "path", c.name, "copy", s.path, "offset", c.off)
			src, err := openSibling(s, c.off)
			if err != nil {
				return err
			}
			src.final, src.rotated, src.id = true, s.ts, c.id
			src.id.Dev, src.id.Ino = s.dev, s.ino
			c.f.Close()
			t.cur = src
			return nil
		}
	}
	t.cfg.Logger.Warn("audit log truncated and no copy found; reading it again from the start", "path", c.name, "lost_after_offset", c.off)
	if _, err := c.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("seek %s: %w", c.name, err)
	}
	c.off = 0
	head, err := preadHead(c.f)
	if err != nil {
		return fmt.Errorf("read %s: %w", c.name, err)
	}
	c.id.Fingerprint, c.id.FingerprintLen = Fingerprint(head)
	return nil
}

// advance moves from a finished file to the next one: the oldest rotated sibling newer
// than it, else the active file. It reports false when there is nothing to move to yet.
func (t *Follower) advance() (bool, error) {
	c := t.cur
	next, err := t.nextAfter(c.id, c.rotated, c.seen)
	if err != nil || next == nil {
		return false, err
	}
	c.f.Close()
	t.cur = next
	t.resetBuffer()
	return true, nil
}

// nextAfter opens the file that follows the file id, which was rotated at rotated (or, when
// unknown, was last seen active at seen).
func (t *Follower) nextAfter(id File, rotated, seen time.Time) (*source, error) {
	for {
		listed := time.Now()
		src, retry, err := t.nextAfterOnce(id, rotated, seen, listed)
		if !retry {
			return src, err
		}
	}
}

// nextAfterOnce is nextAfter; retry says a file was rotated while the active one was opened.
func (t *Follower) nextAfterOnce(id File, rotated, seen, listed time.Time) (*source, bool, error) {
	sibs, err := listRotated(t.cfg.Path)
	if err != nil {
		return nil, false, err
	}
	newer := func(s sibling) bool {
		if !rotated.IsZero() {
			return s.ts.After(rotated)
		}
		return !s.ts.Before(seen.UTC().Truncate(time.Millisecond))
	}
	var pending int64
	var pick *sibling
	for i := range sibs {
		s := sibs[i]
		if !newer(s) || s.matches(id, false) {
			continue
		}
		if pick == nil {
			pick = &sibs[i]
		} else {
			pending += s.size
		}
	}
	if pick != nil {
		src, err := openSibling(*pick, 0)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, false, nil // removed meanwhile; the next poll lists again
			}
			return nil, false, err
		}
		src.final, src.rotated = true, pick.ts
		src.pending = pending
		t.cfg.Logger.Info("reading rotated audit log", "path", pick.path)
		return src, false, nil
	}
	src, err := openSource(t.cfg.Path, false, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if src.id.Dev == id.Dev && src.id.Ino == id.Ino && id.FingerprintLen > 0 {
		head, _ := preadHead(src.f)
		if id.SameContent(head) {
			// Still the file we finished (deleted and not yet replaced): wait.
			src.f.Close()
			return nil, false, nil
		}
	}
	// A rotation between the listing and the open would be missed: list again.
	if again, err := listRotated(t.cfg.Path); err == nil {
		for _, s := range again {
			if newer(s) && !s.matches(id, false) {
				src.f.Close()
				return nil, true, nil
			}
		}
	}
	src.seen, src.opened, src.prev = time.Now(), listed, id
	t.cfg.Logger.Info("reading audit log", "path", t.cfg.Path)
	return src, false, nil
}

// gzipFailed handles a read error in a compressed sibling: one still being written is read
// again later (true); a corrupt one is given up (false) after logging what is lost.
func (t *Follower) gzipFailed(err error) bool {
	c := t.cur
	if fi, serr := os.Stat(c.name); serr == nil && time.Since(fi.ModTime()) < 10*time.Second {
		if src, oerr := openSource(c.name, true, c.off); oerr == nil {
			src.final, src.rotated, src.pending = true, c.rotated, c.pending
			c.f.Close()
			t.cur = src
			t.resetBuffer()
			return true
		}
	}
	t.cfg.Logger.Error("compressed audit log is corrupt; skipping its rest", "path", c.name, "offset", c.off, "err", err)
	t.cur.r = eofReader{}
	return false
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }
