package scan

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/auditlens/auditlens/lib/auditevent"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/classify/dedup"
	"github.com/auditlens/auditlens/services/classify/rules"
)

// chunkBytes is about how much of an input one chunk holds: whole lines, so a chunk can be
// larger by one line. A variable for the tests.
var chunkBytes = 1 << 20

// chunk is a run of consecutive lines of one input, classified by one worker. What the
// worker finds is kept in order in recs, and written by the scanner in input order.
type chunk struct {
	name  string
	data  []byte
	lines []span
	// err ends the input, after the lines.
	err  error
	recs []record
	// json holds the JSON lines of the findings in recs (--format json).
	json []byte
	done chan struct{}
}

// span is one line of a chunk: data[start:end] and its number.
type span struct {
	n, start, end int
	tooLong       bool
}

// record is a finding, not yet de-duplicated, or a bad line.
type record struct {
	f    *auditlensv1.Finding
	at   position
	key  string // dedup.Key
	line [2]int // its JSON line: json[line[0]:line[1]]
	pos  string
	err  error
}

// newChunk returns a chunk of the input name: a free one (its buffers kept from the chunk it
// was) or a new one.
func (s *scanner) newChunk(name string) *chunk {
	n := s.chunks.Add(1)
	for p := s.peakChunks.Load(); n > p && !s.peakChunks.CompareAndSwap(p, n); p = s.peakChunks.Load() {
	}
	var c *chunk
	select {
	case c = <-s.freeChunks:
	default:
		c = &chunk{}
	}
	if cap(c.data) == 0 {
		c.data = make([]byte, 0, chunkBytes+2*tailRead)
	}
	c.name, c.data, c.lines, c.err, c.recs, c.json = name, c.data[:0], c.lines[:0], nil, c.recs[:0], c.json[:0]
	c.done = make(chan struct{})
	return c
}

// free keeps c for a next chunk, up to as many as can be in memory at once.
func (s *scanner) free(c *chunk) {
	s.chunks.Add(-1)
	clear(c.recs) // the findings
	if cap(c.data) > 4*chunkBytes {
		c.data = nil // a document or a long line: not kept
	}
	select {
	case s.freeChunks <- c:
	default:
	}
}

// runParallel reads the inputs in this order in one goroutine, cut into chunks at line
// boundaries; n workers classify the chunks at once, and this goroutine takes their results
// in input order, de-duplicates the findings (the stages of one request may fall in two
// chunks) and writes them: the output is that of one worker reading as it goes. At most 2n
// chunks wait for their turn (2n+2 are in memory at most: those, the one being written and
// the one being read), so memory does not grow with the input.
func (s *scanner) runParallel(files []string, stdin io.Reader, n int) {
	work := make(chan *chunk, n)
	pending := make(chan *chunk, 2*n) // input order
	s.freeChunks = make(chan *chunk, 2*n+2)
	var wg sync.WaitGroup
	for range n {
		out := &chunkSink{s: s, json: s.enc != nil}
		w := s.newWorker(out)
		wg.Go(func() {
			for c := range work {
				out.c, out.sighted = c, nil
				for _, l := range c.lines {
					w.read(c.name, l.n, c.data[l.start:l.end], l.tooLong)
				}
				close(c.done)
			}
			w.flushEvents()
		})
	}
	wg.Go(func() {
		defer close(pending)
		defer close(work)
		send := func(c *chunk) {
			if len(c.lines) > 0 || c.err != nil {
				pending <- c
				work <- c
			} else {
				s.free(c)
			}
		}
		for _, f := range files {
			if err := s.readChunks(f, stdin, send); err != nil {
				c := s.newChunk(f)
				c.err = err
				send(c)
			}
		}
	})
	for c := range pending {
		<-c.done
		s.merge(c)
		s.free(c)
	}
	wg.Wait()
}

// merge takes the results of a chunk, as the worker reading as it goes would have.
func (s *scanner) merge(c *chunk) {
	for i := range c.recs {
		r := &c.recs[i]
		if r.err != nil {
			s.bad(r.pos, r.err)
			continue
		}
		if s.seen.FirstTime(r.key) {
			var line []byte
			if s.enc != nil {
				line = c.json[r.line[0]:r.line[1]]
			}
			s.emit(r.f, line, r.at)
		}
	}
	if c.err != nil {
		s.inputFailed(c.err)
	}
}

// chunkSink keeps what a worker finds in the chunk it reads: every match as a finding (and
// its JSON line), since whether it was seen before is known only in input order.
type chunkSink struct {
	s    *scanner
	c    *chunk
	json bool // --format json: the lines are written into the chunk
	// sighted holds the sighting keys of the chunk's findings so far.
	sighted map[string]bool
}

func (k *chunkSink) match(ev *auditevent.Event, m *rules.Match, at position) {
	cluster := k.s.cfg.Cluster
	key := dedup.Key(cluster, m.AuditID(ev.AuditID), m.Rule.ID, m.RequestReceived(ev))
	if m.ID != "" {
		// A sighting (a kubelet's release, once a day): its first in the chunk stands for
		// the chunk's others, which would be dropped in input order anyway.
		if k.sighted[key] {
			return
		}
		if k.sighted == nil {
			k.sighted = map[string]bool{}
		}
		k.sighted[key] = true
	}
	r := record{f: k.s.engine.Finding(ev, m, cluster, ""), at: at, key: key}
	if k.json {
		start := len(k.c.json)
		k.c.json = appendJSON(k.c.json, r.f)
		r.line = [2]int{start, len(k.c.json)}
	}
	k.c.recs = append(k.c.recs, r)
}

func (k *chunkSink) bad(pos string, err error) {
	k.c.recs = append(k.c.recs, record{pos: pos, err: err})
}

// tailRead is how much the reader reads at a time once a chunk holds chunkBytes, looking for
// the end of the line that crosses it: what is read past that line moves to the next chunk.
const tailRead = 16 << 10

// readChunks reads one input (see input) into chunks of whole lines and passes each to send,
// in order; an error ends the input after the chunks of the lines before it. Lines are read
// straight into a chunk's buffer in large blocks (once the reader's buffer, filled to tell
// gzip and documents apart, is empty) and cut there, so the one reading goroutine copies
// nothing: the worker that takes the chunk decodes the lines where they are. Lines are
// numbered, trimmed and capped as input does: a chunk ends after the line that takes it to
// chunkBytes, and a line over --max-event-size is dropped as it is read (tooLong), so a
// chunk holds at most one such line's cap plus a block.
func (s *scanner) readChunks(name string, stdin io.Reader, send func(*chunk)) error {
	in, err := s.open(name, stdin)
	if err != nil {
		return err
	}
	defer in.close()
	if in.doc != nil { // a document read whole: the chunk takes it as it is
		c := s.newChunk(in.name)
		c.data = in.doc
		c.lines = append(c.lines, span{end: len(in.doc)})
		send(c)
		return nil
	}
	limit := s.cfg.MaxEventSize
	c := s.newChunk(in.name)
	n := 1              // the number of the line being read
	start, from := 0, 0 // it starts at c.data[start]; from is where to look for its end
	skipping := false   // it is over the cap: its bytes are dropped as they come
	drained := false    // in.br's buffer is empty: read in.raw
	// line ends the line being read at c.data[end] (its newline, or the end of the input);
	// the next starts at next.
	line := func(end, next int) {
		raw := end - start
		if end < len(c.data) {
			raw++ // the newline
		}
		switch {
		case skipping || raw > limit+2:
			c.lines = append(c.lines, span{n: n, start: start, end: start, tooLong: true})
		default:
			e := end
			for e > start && (c.data[e-1] == '\r' || c.data[e-1] == '\n') {
				e--
			}
			if e > start {
				c.lines = append(c.lines, span{n: n, start: start, end: e})
			}
		}
		n++
		skipping = false
		start, from = next, next
	}
	for {
		want := max(chunkBytes-len(c.data), tailRead)
		c.data = slices.Grow(c.data, want)
		var k int
		var err error
		if !drained {
			if b := in.br.Buffered(); b > 0 {
				k, err = in.br.Read(c.data[len(c.data) : len(c.data)+min(want, b)])
			} else {
				drained = true
				_, err = in.br.Read(nil) // an error met while filling the buffer
			}
		}
		if drained && err == nil {
			k, err = in.raw.Read(c.data[len(c.data) : len(c.data)+want])
		}
		c.data = c.data[:len(c.data)+k]
		for {
			i := bytes.IndexByte(c.data[from:], '\n')
			if i < 0 {
				break
			}
			if skipping {
				// Drop the rest of the long line: the bytes after it move up.
				rest := copy(c.data[start:], c.data[from+i+1:])
				c.data = c.data[:start+rest]
				line(start, start)
				continue
			}
			line(from+i, from+i+1)
			if start >= chunkBytes {
				// What was read past the line moves to the next chunk, taken after this one
				// is sent (so no more chunks are held than before; it may be this one again,
				// then the bytes move to its front).
				rest := c.data[start:]
				c.data = c.data[:start]
				send(c)
				c = s.newChunk(in.name)
				c.data = append(c.data, rest...)
				start, from = 0, 0
			}
		}
		if !skipping && len(c.data)-start > limit+2 {
			skipping = true
		}
		if skipping {
			c.data = c.data[:start]
		}
		from = len(c.data)
		if err != nil {
			if skipping || start < len(c.data) {
				line(len(c.data), len(c.data))
			}
			send(c)
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read %s: %w", in.name, err)
		}
	}
}
