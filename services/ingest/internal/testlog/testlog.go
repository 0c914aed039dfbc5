// Package testlog writes audit logs the way kube-apiserver does, for tests: unique events
// derived from genuine ones, appended line by line, rotated by rename (lumberjack) with
// optional gzip, or by copytruncate.
package testlog

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/ingest/tail"
)

// Events are genuine audit events, one JSON object per element.
type Events [][]byte

// Load reads testdata/events.jsonl of the ingest module.
func Load(t testing.TB) Events {
	t.Helper()
	module, err := testkit.ModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(module, "testdata", "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ev Events
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		ev = append(ev, append([]byte(nil), sc.Bytes()...))
	}
	if err := sc.Err(); err != nil || len(ev) == 0 {
		t.Fatalf("load events: %v (%d)", err, len(ev))
	}
	return ev
}

// Event returns event number n: a genuine event whose auditID gets the suffix "-n", so
// every n gives a distinct id. It also returns the id key ("<auditID>/<stage>").
func (e Events) Event(n int) ([]byte, string) {
	src := e[n%len(e)]
	ref, err := auditevent.Peek(src, 0)
	if err != nil {
		panic(fmt.Sprintf("testdata event %d: %v", n%len(e), err))
	}
	old := []byte(`"auditID":"` + ref.AuditID + `"`)
	id := fmt.Sprintf("%s-%d", ref.AuditID, n)
	out := bytes.Replace(src, old, []byte(`"auditID":"`+id+`"`), 1)
	return out, id + "/" + ref.Stage
}

// Writer appends events to an audit log and rotates it.
type Writer struct {
	Path string
	// Logrotate names rotated files as logrotate does (audit.log.1, older ones renumbered
	// up, audit.log.2.gz, ...) instead of as the apiserver does (audit-<time>.log).
	Logrotate bool
	f         *os.File
	last      time.Time
}

// NewWriter creates (or appends to) the log at path.
func NewWriter(t testing.TB, path string) *Writer {
	t.Helper()
	w := &Writer{Path: path}
	if err := w.open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.f.Close() })
	return w
}

func (w *Writer) open() error {
	f, err := os.OpenFile(w.Path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	w.f = f
	return nil
}

// Write appends raw bytes (a line, or part of one).
func (w *Writer) Write(b []byte) error {
	_, err := w.f.Write(b)
	return err
}

// Line appends one line.
func (w *Writer) Line(b []byte) error {
	return w.Write(append(append(make([]byte, 0, len(b)+1), b...), '\n'))
}

// Events appends events from..to-1 of ev, one line each, and returns their ids
// ("<auditID>/<stage>") in order.
func (w *Writer) Events(t testing.TB, ev Events, from, to int) []string {
	t.Helper()
	ids := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		line, id := ev.Event(i)
		if err := w.Line(line); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// stamp returns the rotation time, in lumberjack's resolution: the current time, waiting
// for the next millisecond when the previous rotation had this one (lumberjack would
// overwrite the earlier file).
func (w *Writer) stamp() time.Time {
	for {
		t := time.Now().UTC().Truncate(time.Millisecond)
		if t.After(w.last) {
			w.last = t
			return t
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// Rotate renames the log to its rotated name and starts a new one, as lumberjack does. With
// compress the rotated file is then gzipped and the plain one removed. It returns the
// rotated file's final name.
func (w *Writer) Rotate(compress bool) (string, error) {
	if err := w.f.Close(); err != nil {
		return "", err
	}
	rot, err := w.rotatedName()
	if err != nil {
		return "", err
	}
	if err := os.Rename(w.Path, rot); err != nil {
		return "", err
	}
	if err := w.open(); err != nil {
		return "", err
	}
	if !compress {
		return rot, nil
	}
	return rot + ".gz", Gzip(rot)
}

// rotatedName is the name for the next rotated file; with Logrotate it first renumbers the
// rotated files there are (audit.log.N[.gz] becomes audit.log.N+1[.gz]).
func (w *Writer) rotatedName() (string, error) {
	if !w.Logrotate {
		return tail.RotatedName(w.Path, w.stamp()), nil
	}
	// logrotate's files are ordered by modification time, which the kernel keeps at a coarse
	// tick (a few ms): rotate no faster than real logrotate could tell apart.
	time.Sleep(15 * time.Millisecond)
	n := 1
	for exists(fmt.Sprintf("%s.%d", w.Path, n)) || exists(fmt.Sprintf("%s.%d.gz", w.Path, n)) {
		n++
	}
	for ; n > 1; n-- {
		for _, sfx := range []string{"", ".gz"} {
			from := fmt.Sprintf("%s.%d%s", w.Path, n-1, sfx)
			if exists(from) {
				if err := os.Rename(from, fmt.Sprintf("%s.%d%s", w.Path, n, sfx)); err != nil {
					return "", err
				}
			}
		}
	}
	return w.Path + ".1", nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Gzip compresses path to path.gz and removes path, like lumberjack's compression and gzip
// (which keeps the modification time).
func Gzip(path string) error {
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(path + ".gz")
	if err != nil {
		return err
	}
	zw := gzip.NewWriter(out)
	if _, err := io.Copy(zw, in); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	if fi, err := in.Stat(); err == nil {
		if err := os.Chtimes(path+".gz", fi.ModTime(), fi.ModTime()); err != nil {
			return err
		}
	}
	return os.Remove(path)
}

// CopyTruncate copies the log to its rotated name and truncates it in place, as logrotate's
// copytruncate does. It returns the copy's name.
func (w *Writer) CopyTruncate() (string, error) {
	rot, err := w.rotatedName()
	if err != nil {
		return "", err
	}
	in, err := os.Open(w.Path)
	if err != nil {
		return "", err
	}
	defer in.Close()
	out, err := os.Create(rot)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(out, in); err != nil {
		return "", err
	}
	if err := out.Close(); err != nil {
		return "", err
	}
	return rot, w.f.Truncate(0)
}

// Logger writes a test's logs to its output (nowhere when INGEST_TEST_QUIET is set).
func Logger(t testing.TB) *slog.Logger {
	var w = t.Output()
	if os.Getenv("INGEST_TEST_QUIET") != "" {
		w = io.Discard
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}
