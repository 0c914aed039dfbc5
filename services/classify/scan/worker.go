package scan

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/envelope"
	"github.com/auditlens/auditlens/lib/kubeversion"
	"github.com/auditlens/auditlens/services/classify/rules"
)

// sink receives what a worker finds, in input order.
type sink interface {
	// match is one match of a rule on ev, read at at; ev is valid only during the call.
	match(ev *auditevent.Event, m *rules.Match, at position)
	// bad is a bad line, or a bad item of a line (pos names it).
	bad(pos string, err error)
}

// worker decodes lines and classifies their events: one per goroutine, as its decoders
// reuse their buffers. What it counts (events, Metadata-level writes, envelope records
// without events) does not depend on the order, and is added up for the summary.
type worker struct {
	engine       *rules.Engine
	dec          *auditevent.Decoder
	env          *envelope.Decoder
	out          sink
	maxEventSize int
	matches      []rules.Match
	// events is the scan's count of events, shared by the workers and read by the progress
	// line: counted adds up here and goes there every eventBatch events (and at the end), not
	// once per event, which two workers would contend for.
	events  *atomic.Int64
	counted int64
	// metadataOnly counts, by resource, writes logged without the body a rule reads.
	metadataOnly map[string]*int
	// skipped counts envelope records without audit events, by reason.
	skipped map[string]int
	// controlPlane follows the releases the control plane's user agents name.
	controlPlane kubeversion.ControlPlane
	// successorReads holds each caller's newest read (Unix seconds) of the successor of each
	// API it replaces: a read of the old version soon after is a reader's of every version.
	successorReads map[readerKey]*int64
	// name and n are where the line being read is (n 0: a whole document).
	name string
	n    int
}

// readerKey is one caller of one API version that has a successor.
type readerKey = rules.APICaller

// maxReaders bounds successorReads; past it, the map starts again (a read of the old
// version then may count as a use: a finding more, never one less).
const maxReaders = 100_000

// readers keeps ev's reads of successors and makes its read of an old version, soon after
// the caller read the successor, an enumerator-read (rules.ReadsEveryVersion), as the service
// does: the scan of a log and the service agree. Each worker keeps its own: a chunk of a file
// read in parallel holds the reads of minutes.
func (w *worker) readers(ev *auditevent.Event, sec int64) {
	mv := w.engine.MoveOf(ev)
	if !mv.Read {
		return
	}
	if at := w.successorReads[readerKey{API: mv.Old, User: ev.User.Username, Agent: ev.UserAgent}]; mv.IsOld && !mv.Missing && at != nil && rules.ReadsEveryVersion(*at, sec) {
		for i := range w.matches {
			w.engine.AsEnumeratorRead(&w.matches[i], rules.BothVersions)
		}
	}
	if len(mv.Replaces) == 0 {
		return
	}
	if w.successorReads == nil || len(w.successorReads) >= maxReaders {
		w.successorReads = map[readerKey]*int64{}
	}
	for _, api := range mv.Replaces {
		k := readerKey{API: api, User: ev.User.Username, Agent: ev.UserAgent}
		if at := w.successorReads[k]; at != nil {
			*at = max(*at, sec) // in place: assigning would store the key given, its strings the line's
			continue
		}
		// The event's strings live until the next line: a key kept owns its strings.
		k.User, k.Agent = strings.Clone(k.User), strings.Clone(k.Agent)
		at := sec
		w.successorReads[k] = &at
	}
}

// newWorker returns a worker that sends what it finds to out.
func (s *scanner) newWorker(out sink) *worker {
	w := &worker{
		engine: s.engine, dec: auditevent.NewDecoder(s.cfg.MaxEventSize), env: envelope.NewDecoder(0), out: out,
		maxEventSize: s.cfg.MaxEventSize, events: &s.events, metadataOnly: map[string]*int{}, skipped: map[string]int{},
	}
	s.workers = append(s.workers, w)
	return w
}

// eventBatch is how many events a worker counts before adding them to the scan's count.
const eventBatch = 256

// flushEvents adds the events counted to the scan's count.
func (w *worker) flushEvents() {
	w.events.Add(w.counted)
	w.counted = 0
}

// read classifies one line of an input (a lineFunc).
func (w *worker) read(name string, n int, line []byte, tooLong bool) {
	w.name, w.n = name, n
	if tooLong {
		w.out.bad(w.pos(), fmt.Errorf("%w (line over %d bytes)", auditevent.ErrTooLarge, w.maxEventSize))
		return
	}
	if len(bytes.TrimSpace(line)) == 0 {
		return // blank line
	}
	if err := w.decode(line); err != nil {
		// An EventList may have good items and bad ones: each bad one is reported.
		var multi interface{ Unwrap() []error }
		if errors.As(err, &multi) {
			for _, e := range multi.Unwrap() {
				w.out.bad(w.pos(), e)
			}
			return
		}
		w.out.bad(w.pos(), err)
	}
}

// pos is "file:line", or "file" for a document read whole.
func (w *worker) pos() string {
	if w.n == 0 {
		return w.name
	}
	return w.name + ":" + strconv.Itoa(w.n)
}

func (w *worker) event(ev *auditevent.Event) error {
	if w.counted++; w.counted == eventBatch {
		w.flushEvents()
	}
	if ev.RequestObjectRaw == nil && rules.NeedsBody(ev) && (ev.Level == "Metadata" || ev.Level == "None" || ev.Level == "") {
		// Look up, never assign, with the event's string: an assignment would store it as the
		// key, and it lives only until the next line.
		if n := w.metadataOnly[ev.ObjectRef.Resource]; n != nil {
			*n++
		} else {
			w.metadataOnly[strings.Clone(ev.ObjectRef.Resource)] = new(1)
		}
	}
	w.controlPlane.Observe(ev.User.Username, ev.UserAgent, ev.EventTime())
	w.matches = w.engine.Classify(ev, w.matches[:0])
	if at := ev.EventTime(); !at.IsZero() {
		w.readers(ev, at.Unix())
	}
	for i := range w.matches {
		w.out.match(ev, &w.matches[i], position{w.name, w.n})
	}
	return nil
}
