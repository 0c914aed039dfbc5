// Package tail follows a kube-apiserver audit log file and the siblings its rotation makes,
// handing out complete lines with the position to checkpoint once they are acknowledged.
package tail

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/auditlens/auditlens/services/ingest/checkpoint"
)

// Where to start reading when there is no checkpoint.
const (
	StartBeginning = "beginning" // the oldest rotated sibling, then on to the active file
	StartEnd       = "end"       // the end of the active file: only what is written from now on
)

// Errors attached to lines that cannot be used; match with errors.Is.
var (
	ErrLineTooLong = errors.New("line longer than the size cap")
	ErrIncomplete  = errors.New("incomplete last line of a finished file")
)

// errRestart says the source changed under a read: read again.
var errRestart = errors.New("restart read")

// headKeep is how much of an unusable line is kept for the dead-letter stream.
const headKeep = 16 << 10

// Config configures a Follower.
type Config struct {
	// Path of the active audit log (the apiserver's --audit-log-path).
	Path string
	// StartAt applies when there is no checkpoint: StartBeginning or StartEnd.
	StartAt string
	// MaxLineSize caps a line; longer ones are handed out with ErrLineTooLong (default 1 MiB).
	MaxLineSize int
	// PollInterval is how often an idle active file is checked for growth and rotation (default 200ms).
	PollInterval time.Duration
	// ReadBuffer is the read size (default 1 MiB, at least MaxLineSize+1).
	ReadBuffer int
	Logger     *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.MaxLineSize <= 0 {
		c.MaxLineSize = 1 << 20
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 200 * time.Millisecond
	}
	if c.ReadBuffer <= 0 {
		c.ReadBuffer = 1 << 20
	}
	if c.ReadBuffer < c.MaxLineSize+1 {
		c.ReadBuffer = c.MaxLineSize + 1
	}
	if c.StartAt == "" {
		c.StartAt = StartBeginning
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Path == "" {
		return errors.New("--audit-log is empty")
	}
	if c.StartAt != "" && c.StartAt != StartBeginning && c.StartAt != StartEnd {
		return fmt.Errorf("--start-at %q: want %s or %s", c.StartAt, StartBeginning, StartEnd)
	}
	return nil
}

// Line is one line of the log, without its newline.
type Line struct {
	Data   []byte
	Offset int64 // of the first byte, in the (decompressed) file
	// Err is ErrLineTooLong or ErrIncomplete when the line is unusable; Data then holds its
	// first bytes only.
	Err error
}

// Chunk is a run of lines from one file.
type Chunk struct {
	Lines []Line
	// Name of the file the lines come from.
	Name string
	// Pos is the position after the last line: the checkpoint once every line before it is
	// acknowledged. A chunk without lines still moves Pos (to the next file).
	Pos checkpoint.Position
	// CaughtUp is set on an empty chunk when the active file has no new complete line.
	CaughtUp bool

	arena []byte // backs the lines' Data; see Follower.Release
}

// Stats are counters a Follower keeps; read them with the atomic methods.
type Stats struct {
	LinesRead   atomic.Int64
	BytesRead   atomic.Int64
	Rotations   atomic.Int64
	Truncations atomic.Int64
}

// source is the file being read.
type source struct {
	name    string
	f       *os.File
	r       io.Reader // f, or a gzip reader over f
	gz      bool
	final   bool // nothing more will be appended: a rotated sibling or a replaced active file
	id      checkpoint.File
	rotated time.Time // rotation time from the name, zero for the active file
	seen    time.Time // last time this was the active file
	off     int64     // file offset of buf[start]
	size    int64     // last known size
	pending int64     // bytes in later files still to read
	gone    bool      // the active path was found missing (logged once)
	// opened is when the active file was chosen; while nothing of it is fingerprinted yet,
	// a sibling rotated after it holds its first content (copytruncate).
	opened time.Time
	prev   checkpoint.File // the file read before this one
}

// Follower reads an audit log and its rotated siblings in order. It is used from one
// goroutine.
type Follower struct {
	cfg   Config
	start *checkpoint.Position
	cur   *source
	buf   []byte
	lo    int // buf[lo:hi] holds read bytes not yet handed out
	hi    int
	// A line longer than the buffer is skipped up to its newline.
	skipping  bool
	skipStart int64
	skipHead  []byte
	// waitedForActive: with StartEnd the active file did not exist at first, so all of it is new.
	waitedForActive bool
	waiting         bool // logged that the audit log does not exist yet
	Stats           Stats

	free chan []byte // arenas of released chunks, for reuse
	at   atomic.Pointer[readPoint]
}

// New returns a Follower that resumes at start (nil: no checkpoint, use cfg.StartAt).
func New(cfg Config, start *checkpoint.Position) *Follower {
	cfg = cfg.withDefaults()
	return &Follower{cfg: cfg, start: start, buf: make([]byte, cfg.ReadBuffer), free: make(chan []byte, 16)}
}

// Release hands the memory of c's lines back for reuse once nothing refers to them any more
// (they were published). Optional; safe from any goroutine.
func (t *Follower) Release(c *Chunk) {
	if c.arena == nil {
		return
	}
	select {
	case t.free <- c.arena[:0]:
	default:
	}
	c.arena, c.Lines = nil, nil
}

// newArena returns memory for at least n bytes of lines, reused when possible.
func (t *Follower) newArena(n int) []byte {
	select {
	case a := <-t.free:
		if cap(a) >= n {
			return a
		}
	default:
	}
	return make([]byte, 0, n)
}

// Close releases the open file.
func (t *Follower) Close() error {
	if t.cur != nil {
		err := t.cur.f.Close()
		t.cur = nil
		return err
	}
	return nil
}

// Next returns the next lines, at most maxLines lines and about maxBytes bytes. With wait
// false it returns an empty chunk with CaughtUp when the active file has nothing new;
// with wait true it polls until there are lines, the file changes or ctx is done.
func (t *Follower) Next(ctx context.Context, maxLines, maxBytes int, wait bool) (Chunk, error) {
	for {
		if err := ctx.Err(); err != nil {
			return Chunk{}, err
		}
		if t.cur == nil {
			ok, err := t.open()
			if err != nil {
				return Chunk{}, err
			}
			if !ok {
				if !t.waiting {
					t.waiting = true
					t.cfg.Logger.Info("waiting for the audit log to appear", "path", t.cfg.Path)
				}
				if !wait {
					return Chunk{CaughtUp: true, Name: t.cfg.Path}, nil
				}
				if err := t.sleep(ctx); err != nil {
					return Chunk{}, err
				}
				continue
			}
			return t.emptyChunk(), nil
		}
		if c, ok := t.extract(maxLines, maxBytes); ok {
			return c, nil
		}
		n, err := t.fill()
		if n > 0 || errors.Is(err, errRestart) {
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			if t.cur.gz {
				if retry := t.gzipFailed(err); retry {
					if err := t.sleep(ctx); err != nil {
						return Chunk{}, err
					}
				}
				continue
			}
			return Chunk{}, fmt.Errorf("read %s: %w", t.cur.name, err)
		}
		if t.cur.final && t.copyInProgress() {
			if !wait {
				c := t.emptyChunk()
				c.CaughtUp = true
				return c, nil
			}
			if err := t.sleep(ctx); err != nil {
				return Chunk{}, err
			}
			continue
		}
		if t.cur.final {
			if c, ok := t.finishLine(); ok {
				return c, nil
			}
			moved, err := t.advance()
			if err != nil {
				return Chunk{}, err
			}
			if moved {
				return t.emptyChunk(), nil
			}
		} else {
			changed, err := t.check()
			if err != nil {
				return Chunk{}, err
			}
			if changed {
				continue
			}
		}
		if !wait {
			c := t.emptyChunk()
			c.CaughtUp = true
			return c, nil
		}
		if err := t.sleep(ctx); err != nil {
			return Chunk{}, err
		}
	}
}

func (t *Follower) sleep(ctx context.Context) error {
	tm := time.NewTimer(t.cfg.PollInterval)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// Position is where the next line starts.
func (t *Follower) Position() checkpoint.Position {
	if t.cur == nil {
		if t.start != nil {
			return *t.start
		}
		return checkpoint.Position{}
	}
	p := checkpoint.Position{File: t.cur.id, Offset: t.cur.off, Rotated: t.cur.rotated, SeenActive: t.cur.seen}
	if t.skipping {
		// Inside a line too long to keep: resume at its start and skip it again.
		p.Offset = t.skipStart
	}
	p.File.Path = t.cur.name
	return p
}

func (t *Follower) emptyChunk() Chunk {
	t.updateLag() // a new file may be open
	return Chunk{Name: t.cur.name, Pos: t.Position()}
}

// extract hands out complete lines from the buffer.
func (t *Follower) extract(maxLines, maxBytes int) (Chunk, bool) {
	if t.lo == t.hi {
		return Chunk{}, false
	}
	var lines []Line
	var arena []byte
	for t.lo < t.hi && len(lines) < maxLines && len(arena) < maxBytes {
		rest := t.buf[t.lo:t.hi]
		i := bytes.IndexByte(rest, '\n')
		if t.skipping {
			if i < 0 {
				t.cur.off += int64(len(rest))
				t.lo = t.hi
				break
			}
			t.cur.off += int64(i + 1)
			t.lo += i + 1
			t.skipping = false
			lines = append(lines, Line{Data: t.skipHead, Offset: t.skipStart, Err: ErrLineTooLong})
			t.skipHead = nil
			continue
		}
		if i < 0 {
			break
		}
		line := rest[:i]
		off := t.cur.off
		t.cur.off += int64(i + 1)
		t.lo += i + 1
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if arena == nil {
			arena = t.newArena(min(maxBytes+t.cfg.MaxLineSize, (t.hi-t.lo)+len(line)))
		}
		if len(line) > t.cfg.MaxLineSize {
			lines = append(lines, Line{Data: append([]byte(nil), line[:min(len(line), headKeep)]...), Offset: off, Err: ErrLineTooLong})
			continue
		}
		s := len(arena)
		arena = append(arena, line...)
		lines = append(lines, Line{Data: arena[s:len(arena):len(arena)], Offset: off})
	}
	if t.lo == t.hi {
		t.lo, t.hi = 0, 0
	}
	t.Stats.LinesRead.Add(int64(len(lines)))
	t.updateLag()
	if len(lines) == 0 {
		return Chunk{}, false
	}
	return Chunk{Lines: lines, Name: t.cur.name, Pos: t.Position(), arena: arena}, true
}

// fill reads more bytes into the buffer.
func (t *Follower) fill() (int, error) {
	if t.lo > 0 && t.hi == len(t.buf) {
		copy(t.buf, t.buf[t.lo:t.hi])
		t.hi -= t.lo
		t.lo = 0
	}
	if t.hi == len(t.buf) {
		// A full buffer without a newline: the line is too long; skip to its end.
		t.skipping = true
		t.skipStart = t.cur.off
		t.skipHead = append([]byte(nil), t.buf[:min(t.hi, headKeep)]...)
		t.cur.off += int64(t.hi)
		t.lo, t.hi = 0, 0
	}
	n, err := t.cur.r.Read(t.buf[t.hi:])
	if n > 0 && !t.cur.final && !t.cur.gz && t.cur.id.FingerprintLen == 0 && t.cur.off == 0 && t.hi == 0 && !t.skipping {
		if switched, err := t.copiedWhileEmpty(); err != nil || switched {
			if err == nil {
				err = errRestart
			}
			return 0, err
		}
		// These bytes were read from offset 0: they are the head, whatever happens to the
		// file after the read.
		t.cur.id.Fingerprint, t.cur.id.FingerprintLen = checkpoint.Fingerprint(t.buf[:n])
	}
	if n > 0 && !t.cur.final && !t.cur.gz {
		// Bytes read from the active file are only trusted when its head is unchanged
		// afterwards: a truncation and rewrite would otherwise feed us the new content
		// from the old offset.
		ok, herr := t.headUnchanged()
		if herr != nil {
			return 0, herr
		}
		if !ok {
			if err := t.truncated(); err != nil {
				return 0, err
			}
			return 0, errRestart
		}
	}
	t.hi += n
	t.Stats.BytesRead.Add(int64(n))
	return n, err
}

// headUnchanged checks the active file still starts with the fingerprinted bytes, growing
// the fingerprint while the file is shorter than checkpoint.FingerprintSize.
func (t *Follower) headUnchanged() (bool, error) {
	id := &t.cur.id
	if id.FingerprintLen == checkpoint.FingerprintSize {
		head := make([]byte, checkpoint.FingerprintSize)
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
	id.Fingerprint, id.FingerprintLen = checkpoint.Fingerprint(head)
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

// finishLine hands out what is left of a finished file that does not end in a newline.
func (t *Follower) finishLine() (Chunk, bool) {
	if t.lo == t.hi && !t.skipping {
		return Chunk{}, false
	}
	var l Line
	if t.skipping {
		l = Line{Data: t.skipHead, Offset: t.skipStart, Err: ErrLineTooLong}
	} else {
		rest := t.buf[t.lo:t.hi]
		l = Line{Data: append([]byte(nil), rest[:min(len(rest), headKeep)]...), Offset: t.cur.off, Err: ErrIncomplete}
		t.cur.off += int64(len(rest))
	}
	t.skipping, t.skipHead = false, nil
	t.lo, t.hi = 0, 0
	return Chunk{Lines: []Line{l}, Name: t.cur.name, Pos: t.Position()}, true
}

func (t *Follower) resetBuffer() {
	t.lo, t.hi = 0, 0
	t.skipping, t.skipHead = false, nil
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
	c.id.Fingerprint, c.id.FingerprintLen = checkpoint.Fingerprint(head)
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
func (t *Follower) nextAfter(id checkpoint.File, rotated, seen time.Time) (*source, error) {
	for {
		listed := time.Now()
		src, retry, err := t.nextAfterOnce(id, rotated, seen, listed)
		if !retry {
			return src, err
		}
	}
}

// nextAfterOnce is nextAfter; retry says a file was rotated while the active one was opened.
func (t *Follower) nextAfterOnce(id checkpoint.File, rotated, seen, listed time.Time) (*source, bool, error) {
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
	s.id.Fingerprint, s.id.FingerprintLen = checkpoint.Fingerprint(head)
	return s, nil
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

func (t *Follower) updateLag() {
	c := t.cur
	if !c.final && !c.gz {
		if fi, err := c.f.Stat(); err == nil {
			c.size = fi.Size()
		}
	}
	t.at.Store(&readPoint{f: c.f, size: c.size, off: c.off, pending: c.pending, final: c.final, gz: c.gz, active: t.cfg.Path})
}

// readPoint is where the follower read last, for Lag from other goroutines.
type readPoint struct {
	f                  *os.File // may be closed by now: then size is used
	size, off, pending int64
	final, gz          bool
	active             string
}

// lag measures the bytes behind the read point now: the rest of the file being read (its
// current size unless it is finished or compressed), rotated files not read yet, and the
// active file when the one being read is an older one.
func (p *readPoint) lag() int64 {
	size, final := p.size, p.final
	var cur os.FileInfo
	if !p.final && !p.gz {
		if fi, err := p.f.Stat(); err == nil {
			size, cur = fi.Size(), fi
		} else {
			final = true // closed since: the reader finished it and moved on
		}
	}
	lag := size - p.off
	if p.gz || lag < 0 {
		lag = 0
	}
	if final {
		lag += p.pending
	}
	// The active file counts when it is not the one being read: the reader moves on to it
	// later (also after a rotation it has not noticed yet, being stopped).
	if fi, err := os.Stat(p.active); err == nil && (final || !os.SameFile(fi, cur)) {
		lag += fi.Size()
	}
	return lag
}

// Lag is how many bytes of the audit log lie beyond what the follower read, measured now
// (the log keeps growing while reading waits for the bus). Safe from any goroutine.
func (t *Follower) Lag() int64 {
	if at := t.at.Load(); at != nil {
		return at.lag()
	}
	return 0 // nothing opened yet
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
		src, err := t.nextAfter(checkpoint.File{}, time.Time{}.Add(1), time.Time{})
		if err != nil || src == nil {
			return false, err
		}
		t.cur = src
		t.cfg.Logger.Info("no checkpoint: starting at the beginning", "path", src.name)
		return true, nil
	}
}

// resume finds the checkpointed file among the active file and its rotated siblings.
func (t *Follower) resume(p checkpoint.Position) (bool, error) {
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
