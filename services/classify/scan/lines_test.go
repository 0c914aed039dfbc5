package scan

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// The reader of lines before chunks (bufio line by line, each line copied): the reference
// the chunk reader is checked against (chunks_test.go).

// inputByLines reads one input as input does, line by line.
func (s *scanner) inputByLines(name string, stdin io.Reader, each lineFunc) error {
	in, err := s.open(name, stdin)
	if err != nil {
		return err
	}
	defer in.close()
	if in.doc != nil {
		each(in.name, 0, in.doc, false)
		return nil
	}
	var line []byte
	for n := 1; ; n++ {
		var err error
		var tooLong bool
		line, tooLong, err = readLine(in.br, line[:0], s.cfg.MaxEventSize)
		if len(line) > 0 || tooLong {
			each(in.name, n, line, tooLong)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", in.name, err)
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
