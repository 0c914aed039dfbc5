package scan

import (
	"bufio"
	"compress/gzip"
	"errors"
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
// passes each line that is not empty to each. An error ends the input, after the lines read
// before it were passed.
func (s *scanner) input(name string, stdin io.Reader, each lineFunc) error {
	var r io.Reader
	if name == "-" {
		r = stdin
		name = "stdin"
	} else {
		f, err := os.Open(name)
		if err != nil {
			return err // *fs.PathError: "open NAME: why"
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.IsDir() {
			return fmt.Errorf("%s is a directory: give audit log files", printable.String(name))
		}
		r = f
	}
	br := bufio.NewReaderSize(countingReader{r, &s.bytesRead}, 256<<10)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("%s: gzip: %w", name, err)
		}
		defer zr.Close()
		br = bufio.NewReaderSize(zr, 256<<10)
	}
	if document(br) {
		data, err := readDocument(name, br)
		if err != nil {
			return err
		}
		each(name, 0, data, false)
		return nil
	}
	var line []byte
	for n := 1; ; n++ {
		var err error
		var tooLong bool
		line, tooLong, err = readLine(br, line[:0], s.cfg.MaxEventSize)
		if len(line) > 0 || tooLong {
			each(name, n, line, tooLong)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
	}
}

// readLine reads one line without its newline into buf. A line longer than max is
// consumed and dropped, reporting tooLong.
func readLine(br *bufio.Reader, buf []byte, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(buf)+len(chunk) > max+2 {
				tooLong, buf = true, buf[:0]
			} else {
				buf = append(buf, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if tooLong {
			return nil, true, err
		}
		for len(buf) > 0 && (buf[len(buf)-1] == '\n' || buf[len(buf)-1] == '\r') {
			buf = buf[:len(buf)-1]
		}
		return buf, false, err
	}
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
