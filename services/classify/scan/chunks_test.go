package scan

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// readLines is what the sequential reader passes for an input: "n:text" or "n:tooLong".
func readLines(t *testing.T, s *scanner, stdin io.Reader) ([]string, error) {
	t.Helper()
	var out []string
	err := s.inputByLines("-", stdin, func(_ string, n int, line []byte, tooLong bool) {
		out = append(out, spanText(n, line, tooLong))
	})
	return out, err
}

// chunkLines is the same read by readChunks, and the number of chunks it cut.
func chunkLines(t *testing.T, s *scanner, stdin io.Reader) ([]string, int, error) {
	t.Helper()
	var out []string
	chunks := 0
	err := s.readChunks("-", stdin, func(c *chunk) {
		if len(c.lines) > 0 {
			chunks++
		}
		for _, l := range c.lines {
			if l.end-l.start > chunkBytes+s.cfg.MaxEventSize+2 {
				t.Errorf("a line of %d bytes kept", l.end-l.start)
			}
			out = append(out, spanText(l.n, c.data[l.start:l.end], l.tooLong))
		}
		if cap(c.data) > 2*(chunkBytes+s.cfg.MaxEventSize+2*tailRead) {
			t.Errorf("a chunk of %d bytes", cap(c.data))
		}
		s.free(c)
	})
	return out, chunks, err
}

func spanText(n int, line []byte, tooLong bool) string {
	if tooLong {
		return fmt.Sprintf("%d:tooLong", n)
	}
	return fmt.Sprintf("%d:%s", n, line)
}

// randomLog is n lines of random lengths around the cap and the chunk size, some empty,
// some ending in \r\n or several \r, some longer than the cap by a little or a lot; the last
// one has a newline or not.
func randomLog(r *rand.Rand, n, max int) []byte {
	var b bytes.Buffer
	for i := range n {
		var size int
		switch r.IntN(8) {
		case 0:
			size = 0
		case 1:
			size = max - 2 + r.IntN(6) // at the cap, counting the line end
		case 2:
			size = max + r.IntN(5*max) // over it
		default:
			size = r.IntN(max / 2)
		}
		fmt.Fprintf(&b, "%d:", i)
		for range size {
			b.WriteByte(byte('a' + r.IntN(26)))
		}
		switch r.IntN(6) {
		case 0:
			b.WriteString("\r\n")
		case 1:
			b.WriteString("\r\r\n")
		case 2:
			b.WriteString("\n\n")
		default:
			b.WriteString("\n")
		}
	}
	if r.IntN(2) == 0 {
		b.WriteString("last line without newline")
	}
	return b.Bytes()
}

// The parallel reader cuts the same lines as the sequential one (numbers, text, lines over
// the cap, blank lines, \r\n, a last line without newline), whatever the chunk size and
// however the input arrives: all at once, a few bytes per read, or gzip.
func TestReadChunksCutsTheSameLines(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 60 {
		chunk := []int{1, 100, 1500, 4 << 10, 64 << 10}[round%5]
		smallChunks(t, chunk)
		max := 1024 + r.IntN(3000)
		log := randomLog(r, 10+r.IntN(300), max)
		s, _, code := newScanner([]string{"--max-event-size", fmt.Sprint(max), "x"}, io.Discard, io.Discard)
		if s == nil {
			t.Fatalf("exit %d", code)
		}
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		_, _ = zw.Write(log)
		zw.Close()
		for _, in := range []struct {
			name string
			r    func() io.Reader
		}{
			{"whole", func() io.Reader { return bytes.NewReader(log) }},
			{"trickle", func() io.Reader { return &feed{data: log, n: 1 + round%7} }},
			{"gzip", func() io.Reader { return bytes.NewReader(gz.Bytes()) }},
		} {
			want, werr := readLines(t, s, in.r())
			got, chunks, gerr := chunkLines(t, s, in.r())
			if werr != nil || gerr != nil {
				t.Fatalf("round %d %s: errors %v, %v", round, in.name, werr, gerr)
			}
			if d := firstDiff(strings.Join(want, "\n"), strings.Join(got, "\n")); d != "(none)" {
				t.Fatalf("round %d %s (chunks of %d, cap %d): lines differ at %s", round, in.name, chunk, max, d)
			}
			if len(log) > 4*chunk && chunks < 2 && in.name == "whole" {
				t.Errorf("round %d: %d bytes in %d chunks of %d", round, len(log), chunks, chunk)
			}
		}
	}
}

// feed returns its data n bytes per read (0: as much as asked), then err (nil: io.EOF).
type feed struct {
	data []byte
	n    int
	err  error
}

func (r *feed) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		if r.err == nil {
			return 0, io.EOF
		}
		return 0, r.err
	}
	if r.n > 0 && len(p) > r.n {
		p = p[:r.n]
	}
	k := copy(p, r.data)
	r.data = r.data[k:]
	return k, nil
}

// A read error ends the input after the lines before it (the partial last one too), in
// the parallel reader as in the sequential one, and is reported the same way by scan.
func TestReadChunksStopsAtAReadError(t *testing.T) {
	smallChunks(t, 4<<10)
	log := randomLog(rand.New(rand.NewPCG(3, 4)), 200, 1024)
	log = log[:len(log)*2/3]
	broken := errors.New("disk gone")
	s, _, _ := newScanner([]string{"--max-event-size", "1024", "x"}, io.Discard, io.Discard)
	want, werr := readLines(t, s, &feed{data: log, err: broken})
	got, _, gerr := chunkLines(t, s, &feed{data: log, err: broken})
	if !errors.Is(werr, broken) || !errors.Is(gerr, broken) || werr.Error() != gerr.Error() {
		t.Fatalf("errors %v and %v, want both %v", werr, gerr, broken)
	}
	if d := firstDiff(strings.Join(want, "\n"), strings.Join(got, "\n")); d != "(none)" || len(got) < 50 {
		t.Fatalf("%d lines; differ at %s", len(got), d)
	}

	ev := strings.Repeat(removedEv+"\n"+"not json\n", 200)
	var outs, errs []string
	for _, n := range []string{"1", "2"} {
		var o, e bytes.Buffer
		code := Main([]string{"--parallel", n, "--progress", "never", "-"}, &feed{data: []byte(ev[:len(ev)-7]), err: broken}, &o, &e)
		if code != ExitError {
			t.Errorf("--parallel %s: exit %d, want %d", n, code, ExitError)
		}
		outs, errs = append(outs, o.String()), append(errs, took.ReplaceAllString(e.String(), "(T)"))
	}
	if outs[0] != outs[1] || errs[0] != errs[1] || !strings.Contains(errs[0], "disk gone") {
		t.Fatalf("sequential and parallel differ:\n%s\n%s", errs[0], errs[1])
	}
}

// FuzzReadChunks: whatever the input, chunk size and cap, the chunks hold the lines the
// line reader reads.
func FuzzReadChunks(f *testing.F) {
	f.Add([]byte("a\nb\r\n\n\r\r\nlast"), uint16(1), uint16(0))
	f.Add(randomLog(rand.New(rand.NewPCG(7, 8)), 40, 1024), uint16(300), uint16(100))
	f.Fuzz(func(t *testing.T, log []byte, size, extra uint16) {
		smallChunks(t, 1+int(size)%8192)
		max := 1024 + int(extra)%4096
		s := &scanner{cfg: Config{MaxEventSize: max}, freeChunks: make(chan *chunk, 2)} // reading, without a catalogue
		want, werr := readLines(t, s, &feed{data: log, n: 1 + int(extra)%977})
		got, _, gerr := chunkLines(t, s, &feed{data: log, n: 1 + int(size)%1013})
		if fmt.Sprint(werr) != fmt.Sprint(gerr) || strings.Join(want, "\n") != strings.Join(got, "\n") {
			t.Fatalf("chunks %d, cap %d: lines differ at %s (errors %v, %v)", chunkBytes, max,
				firstDiff(strings.Join(want, "\n"), strings.Join(got, "\n")), werr, gerr)
		}
	})
}
