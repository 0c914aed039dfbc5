package tail_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/services/ingest/internal/testlog"
	"github.com/auditlens/auditlens/services/ingest/tail"
)

// reader drains a Follower, remembering ids and unusable lines.
type reader struct {
	t      *testing.T
	f      *tail.Follower
	ids    []string
	bad    []tail.Line
	pos    tail.Position
	ctx    context.Context
	chunks []string
}

// config is the defaults for the log at path, changed by tune.
func config(path string, tune ...func(*tail.Config)) tail.Config {
	c := tail.DefaultConfig()
	c.Path = path
	for _, f := range tune {
		f(&c)
	}
	return c
}

func newReader(t *testing.T, cfg tail.Config, start *tail.Position) *reader {
	cfg.PollInterval = 5 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	f := tail.New(cfg, start)
	t.Cleanup(func() { f.Close() })
	return &reader{t: t, f: f}
}

// until reads until n usable lines were seen in total.
func (r *reader) until(n int) {
	r.t.Helper()
	parent := r.ctx
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, 30*time.Second)
	defer cancel()
	for len(r.ids) < n {
		c, err := r.f.Next(ctx, 1000, 1<<20, true)
		if err != nil {
			for _, c := range r.chunks {
				r.t.Log(c)
			}
			r.t.Fatalf("after %d of %d lines: %v (%v)", len(r.ids), n, err, context.Cause(ctx))
		}
		r.take(c)
	}
}

func (r *reader) take(c tail.Chunk) {
	if len(c.Lines) > 0 {
		r.chunks = append(r.chunks, fmt.Sprintf("ids[%d:] from %s at %d..%d (%d lines) pos %d", len(r.ids), filepath.Base(c.Name), c.Lines[0].Offset, c.Lines[len(c.Lines)-1].Offset, len(c.Lines), c.Pos.Offset))
	}
	for _, l := range c.Lines {
		if l.Err != nil {
			r.bad = append(r.bad, l)
			continue
		}
		ref, err := auditevent.Peek(l.Data, 0)
		if err != nil {
			r.t.Fatalf("%s:%d: %v: %.80q", c.Name, l.Offset, err, l.Data)
		}
		r.ids = append(r.ids, ref.Key())
	}
	if c.Pos.File.Path != "" {
		r.pos = c.Pos
	}
	// Hand the memory back at once: every test then also checks that reused memory never
	// shows through in later lines.
	r.f.Release(&c)
}

// idle reads until the follower is caught up.
func (r *reader) idle() {
	r.t.Helper()
	for {
		c, err := r.f.Next(context.Background(), 1000, 1<<20, false)
		if err != nil {
			r.t.Fatal(err)
		}
		r.take(c)
		if c.CaughtUp {
			return
		}
	}
}

// exactly checks the reader saw events from..to-1 once each, in order.
func (r *reader) exactly(ev testlog.Events, from, to int) {
	r.t.Helper()
	if len(r.ids) != to-from {
		seen := map[string]int{}
		for i, id := range r.ids {
			if j, dup := seen[id]; dup {
				r.t.Errorf("line %d repeats line %d: %s", i, j, id)
			}
			seen[id] = i
		}
		for _, c := range r.chunks {
			r.t.Log(c)
		}
		r.t.Fatalf("read %d lines, want %d", len(r.ids), to-from)
	}
	for i, id := range r.ids {
		if _, want := ev.Event(from + i); id != want {
			r.t.Fatalf("line %d is %s, want %s", i, id, want)
		}
	}
}

func write(t *testing.T, w *testlog.Writer, ev testlog.Events, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		line, _ := ev.Event(i)
		if err := w.Line(line); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRotationWhileWriting(t *testing.T) {
	ev := testlog.Load(t)
	for _, tc := range []struct {
		name   string
		rotate func(w *testlog.Writer) error
	}{
		{"rename", func(w *testlog.Writer) error { _, err := w.Rotate(false); return err }},
		{"rename+gzip", func(w *testlog.Writer) error { _, err := w.Rotate(true); return err }},
		{"copytruncate", func(w *testlog.Writer) error { _, err := w.CopyTruncate(); return err }},
		{"copytruncate+gzip", func(w *testlog.Writer) error {
			rot, err := w.CopyTruncate()
			if err != nil {
				return err
			}
			return testlog.Gzip(rot)
		}},
	} {
		for _, naming := range []string{"apiserver", "logrotate"} {
			t.Run(tc.name+"/"+naming, func(t *testing.T) { rotateWhileWriting(t, ev, naming == "logrotate", tc.rotate) })
		}
	}
}

// rotateWhileWriting writes events, rotating every 300, while a follower reads them all.
func rotateWhileWriting(t *testing.T, ev testlog.Events, logrotate bool, rotate func(w *testlog.Writer) error) {
	path := filepath.Join(t.TempDir(), "audit.log")
	w := testlog.NewWriter(t, path)
	w.Logrotate = logrotate
	const total, every = 4000, 300
	errc := make(chan error, 1)
	go func() {
		for i := 0; i < total; i++ {
			line, _ := ev.Event(i)
			if err := w.Line(line); err != nil {
				errc <- err
				return
			}
			if i%every == every-1 {
				if err := rotate(w); err != nil {
					errc <- err
					return
				}
			}
		}
		errc <- nil
	}()
	r := newReader(t, config(path), nil)
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() {
		if err := <-errc; err != nil {
			cancel(err)
		}
	}()
	r.ctx = ctx
	r.until(total)
	r.idle()
	r.exactly(ev, 0, total)
	if n := r.f.Stats.LinesRead.Load(); n != total {
		t.Errorf("LinesRead = %d, want %d", n, total)
	}
}

func TestPartialLineWaitsForItsEnd(t *testing.T) {
	ev := testlog.Load(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	w := testlog.NewWriter(t, path)
	write(t, w, ev, 0, 3)
	line, _ := ev.Event(3)
	if err := w.Write(line[:100]); err != nil {
		t.Fatal(err)
	}
	r := newReader(t, config(path), nil)
	r.until(3)
	r.idle()
	if len(r.ids) != 3 || len(r.bad) != 0 {
		t.Fatalf("half a line was handed out: %d lines, %d bad", len(r.ids), len(r.bad))
	}
	if err := w.Write(append(line[100:], '\n')); err != nil {
		t.Fatal(err)
	}
	r.until(4)
	r.exactly(ev, 0, 4)
}

func TestTruncationWithoutCopyRestartsAtZero(t *testing.T) {
	ev := testlog.Load(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	w := testlog.NewWriter(t, path)
	write(t, w, ev, 0, 10)
	r := newReader(t, config(path), nil)
	r.until(10)
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	write(t, w, ev, 10, 15)
	r.until(15)
	r.exactly(ev, 0, 15)
	if r.f.Stats.Truncations.Load() == 0 {
		t.Error("truncation not counted")
	}
}

func TestDeletedWhileOpen(t *testing.T) {
	ev := testlog.Load(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	w := testlog.NewWriter(t, path)
	write(t, w, ev, 0, 10)
	r := newReader(t, config(path), nil)
	r.until(10)
	r.idle()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	// The writer still holds the deleted file and writes on.
	write(t, w, ev, 10, 20)
	r.until(20)
	r.idle()
	w2 := testlog.NewWriter(t, path)
	write(t, w2, ev, 20, 30)
	r.until(30)
	r.exactly(ev, 0, 30)
}

func TestResumeAfterRotationWhileStopped(t *testing.T) {
	ev := testlog.Load(t)
	for _, naming := range []string{"apiserver", "logrotate"} {
		for _, compress := range []bool{false, true} {
			t.Run(naming+"/"+map[bool]string{false: "plain", true: "gzip"}[compress], func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "audit.log")
				w := testlog.NewWriter(t, path)
				w.Logrotate = naming == "logrotate"
				write(t, w, ev, 0, 50)
				r := newReader(t, config(path), nil)
				// Resume exactly after the 21st line, as if only those were acknowledged.
				var pos tail.Position
				for {
					c, err := r.f.Next(context.Background(), 1, 1<<20, false)
					if err != nil {
						t.Fatal(err)
					}
					r.take(c)
					if len(r.ids) > 21 {
						t.Fatalf("read %d lines", len(r.ids))
					}
					if len(r.ids) == 21 {
						pos = c.Pos
						break
					}
				}
				r.f.Close()
				write(t, w, ev, 50, 60)
				if _, err := w.Rotate(compress); err != nil {
					t.Fatal(err)
				}
				write(t, w, ev, 60, 70)
				if _, err := w.Rotate(compress); err != nil {
					t.Fatal(err)
				}
				write(t, w, ev, 70, 80)
				r2 := newReader(t, config(path), &pos)
				r2.until(59)
				r2.idle()
				r2.exactly(ev, 21, 80)
			})
		}
	}
}

func TestResumeWhenCheckpointedFileIsGone(t *testing.T) {
	ev := testlog.Load(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	w := testlog.NewWriter(t, path)
	write(t, w, ev, 0, 10)
	r := newReader(t, config(path), nil)
	r.until(10)
	r.idle()
	pos := r.pos
	r.f.Close()
	first, err := w.Rotate(false)
	if err != nil {
		t.Fatal(err)
	}
	write(t, w, ev, 10, 20)
	if _, err := w.Rotate(true); err != nil {
		t.Fatal(err)
	}
	write(t, w, ev, 20, 30)
	if err := os.Remove(first); err != nil { // aged out by --audit-log-maxbackup
		t.Fatal(err)
	}
	r2 := newReader(t, config(path), &pos)
	r2.until(20)
	r2.idle()
	r2.exactly(ev, 10, 30)
}

func TestStartAt(t *testing.T) {
	ev := testlog.Load(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	w := testlog.NewWriter(t, path)
	write(t, w, ev, 0, 5)
	if _, err := w.Rotate(true); err != nil {
		t.Fatal(err)
	}
	write(t, w, ev, 5, 10)
	if _, err := w.Rotate(false); err != nil {
		t.Fatal(err)
	}
	write(t, w, ev, 10, 15)
	line, _ := ev.Event(15)
	if err := w.Write(line[:50]); err != nil {
		t.Fatal(err)
	}

	begin := newReader(t, config(path, func(c *tail.Config) { c.StartAt = tail.StartBeginning }), nil)
	begin.until(15)
	end := newReader(t, config(path, func(c *tail.Config) { c.StartAt = tail.StartEnd }), nil)
	end.idle()
	if err := w.Write(append(line[50:], '\n')); err != nil {
		t.Fatal(err)
	}
	write(t, w, ev, 16, 18)
	begin.until(18)
	begin.exactly(ev, 0, 18)
	end.until(3)
	end.exactly(ev, 15, 18)
}

func TestUnusableLines(t *testing.T) {
	ev := testlog.Load(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	w := testlog.NewWriter(t, path)
	const maxLine = 4096
	write(t, w, ev, 0, 2)
	long := `{"kind":"Event","auditID":"x","stage":"ResponseComplete","pad":"` + strings.Repeat("a", 3*maxLine) + `"}`
	if err := w.Line([]byte(long)); err != nil { // longer than the whole buffer
		t.Fatal(err)
	}
	write(t, w, ev, 2, 4)
	if err := w.Line([]byte(long[:maxLine+10])); err != nil { // longer than the cap, fits the buffer
		t.Fatal(err)
	}
	write(t, w, ev, 4, 6)
	if err := w.Write([]byte(`{"kind":"Event","audit`)); err != nil { // the writer died mid-line
		t.Fatal(err)
	}
	if _, err := w.Rotate(false); err != nil {
		t.Fatal(err)
	}
	write(t, w, ev, 6, 8)
	r := newReader(t, config(path, func(c *tail.Config) { c.MaxLineSize = maxLine }), nil)
	r.until(8)
	r.exactly(ev, 0, 8)
	want := []error{tail.ErrLineTooLong, tail.ErrLineTooLong, tail.ErrIncomplete}
	if len(r.bad) != len(want) {
		t.Fatalf("%d unusable lines, want %d", len(r.bad), len(want))
	}
	for i, l := range r.bad {
		if !errors.Is(l.Err, want[i]) {
			t.Errorf("unusable line %d: %v, want %v", i, l.Err, want[i])
		}
		if len(l.Data) == 0 || len(l.Data) > 16<<10 {
			t.Errorf("unusable line %d keeps %d bytes", i, len(l.Data))
		}
	}
}

// TestOpenErrorNamesThePathOnce: a log path that cannot be opened gives one clear error, not
// "open X: open X: ...".
func TestOpenErrorNamesThePathOnce(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(notDir, "audit.log") // a file stands where a directory should
	r := newReader(t, config(path, func(c *tail.Config) { c.StartAt = tail.StartEnd }), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := r.f.Next(ctx, 10, 1<<20, false)
	if err == nil {
		t.Fatal("no error for a path under a file")
	}
	if n := strings.Count(err.Error(), path); n != 1 {
		t.Fatalf("error names the path %d times: %v", n, err)
	}
}
