package scan

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/auditlens/auditlens/lib/printable"
)

// lineFunc receives the lines of an input in order, without their line ends: n counts from
// 1, or is 0 for an input that is one pretty-printed JSON document read whole (then line is
// the callee's to keep; else it is valid only during the call). A line over
// --max-event-size is dropped, and passed as tooLong without its text.
type lineFunc func(name string, n int, line []byte, tooLong bool)

// input reads one input, a path or "-" (stdin), plain or gzip (detected by content), and
// passes each line that is not empty to each, in this goroutine (--parallel 1): the input is
// read in chunks (readChunks) and their lines passed in turn. An error ends the input, after
// the lines read before it were passed.
func (s *scanner) input(name string, stdin io.Reader, each lineFunc) error {
	if s.freeChunks == nil {
		s.freeChunks = make(chan *chunk, 1) // the one chunk, read again and again
	}
	return s.readChunks(name, stdin, func(c *chunk) {
		for _, l := range c.lines {
			each(c.name, l.n, c.data[l.start:l.end], l.tooLong)
		}
		if len(c.lines) == 1 && c.lines[0].n == 0 {
			c.data = nil // a document read whole: each may keep it
		}
		s.free(c)
	})
}

// opened is an input ready to read: a pretty-printed document read whole (doc), or lines
// from br. raw is what br reads from (the file or the gzip stream), for the parallel reader
// that reads large blocks straight into its chunks once br's buffer is empty.
type opened struct {
	name  string
	br    *bufio.Reader
	raw   io.Reader
	doc   []byte
	close func()
}

// open opens one input (see input).
func (s *scanner) open(name string, stdin io.Reader) (*opened, error) {
	var r io.Reader
	var closers []func() error
	if name == "-" {
		r = stdin
		name = "stdin"
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, err // *fs.PathError: "open NAME: why"
		}
		closers = append(closers, f.Close)
		if st, err := f.Stat(); err == nil && st.IsDir() {
			f.Close()
			return nil, fmt.Errorf("%s is a directory: give audit log files", printable.String(name))
		}
		r = f
	}
	in := &opened{name: name, raw: countingReader{r, &s.bytesRead}, close: func() {
		for i := len(closers) - 1; i >= 0; i-- {
			_ = closers[i]()
		}
	}}
	in.br = bufio.NewReaderSize(in.raw, 256<<10)
	if magic, _ := in.br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(in.br)
		if err != nil {
			in.close()
			return nil, fmt.Errorf("%s: gzip: %w", name, err)
		}
		closers = append(closers, zr.Close)
		in.raw = zr
		in.br = bufio.NewReaderSize(zr, 256<<10)
	}
	if document(in.br) {
		data, err := readDocument(name, in.br)
		if err != nil {
			in.close()
			return nil, err
		}
		in.doc = data
	}
	return in, nil
}

// countingReader counts the bytes read from a file for the progress bar.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}
