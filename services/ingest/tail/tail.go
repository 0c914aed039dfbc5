// Package tail follows a kube-apiserver audit log file and the siblings its rotation makes,
// handing out complete lines with the position to checkpoint once they are acknowledged.
package tail

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/auditlens/auditlens/lib/reason"
)

// Where to start reading when there is no checkpoint.
const (
	StartBeginning = "beginning" // the oldest rotated sibling, then on to the active file
	StartEnd       = "end"       // the end of the active file: only what is written from now on
)

// Errors attached to lines that cannot be used; match with errors.Is. They carry their
// labels of the reason vocabulary (reason.Of).
var (
	ErrLineTooLong = reason.New("line longer than the size cap", reason.TooLarge)
	ErrIncomplete  = reason.New("incomplete last line of a finished file", reason.IncompleteLine)
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
	// MaxLineSize caps a line; longer ones are handed out with ErrLineTooLong.
	MaxLineSize int
	// PollInterval is how often an idle active file is checked for growth and rotation.
	PollInterval time.Duration
	// ReadBuffer is the read size; New makes it at least MaxLineSize+1.
	ReadBuffer int
	// Logger gets what the Follower has to say; nil: nothing is logged.
	Logger *slog.Logger
}

// DefaultConfig is a Follower's defaults; Path is left to the caller.
func DefaultConfig() Config {
	return Config{StartAt: StartBeginning, MaxLineSize: 1 << 20, PollInterval: 200 * time.Millisecond, ReadBuffer: 1 << 20}
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
	Pos Position
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
	id      File
	rotated time.Time // rotation time from the name, zero for the active file
	seen    time.Time // last time this was the active file
	off     int64     // file offset of buf[start]
	size    int64     // last known size
	pending int64     // bytes in later files still to read
	gone    bool      // the active path was found missing (logged once)
	// opened is when the active file was chosen; while nothing of it is fingerprinted yet,
	// a sibling rotated after it holds its first content (copytruncate).
	opened time.Time
	prev   File // the file read before this one
}

// Follower reads an audit log and its rotated siblings in order. It is used from one
// goroutine.
type Follower struct {
	cfg   Config
	start *Position
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
func New(cfg Config, start *Position) *Follower {
	cfg.ReadBuffer = max(cfg.ReadBuffer, cfg.MaxLineSize+1) // room for a whole line and its newline
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
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
func (t *Follower) Position() Position {
	if t.cur == nil {
		if t.start != nil {
			return *t.start
		}
		return Position{}
	}
	p := Position{File: t.cur.id, Offset: t.cur.off, Rotated: t.cur.rotated, SeenActive: t.cur.seen}
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
		t.cur.id.Fingerprint, t.cur.id.FingerprintLen = Fingerprint(t.buf[:n])
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
