// Package file is ingest's audit log input: it follows a file and its rotated siblings
// (package tail), publishes its lines in batches, several at once, and saves the position
// (package checkpoint) in read order once the bus acknowledged every line before it.
package file

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/backoff"
	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/envelope"
	"github.com/auditlens/auditlens/lib/reason"
	"github.com/auditlens/auditlens/services/ingest/checkpoint"
	"github.com/auditlens/auditlens/services/ingest/input"
	"github.com/auditlens/auditlens/services/ingest/metrics"
	"github.com/auditlens/auditlens/services/ingest/tail"
)

// batch is a run of lines published together; pos is checkpointed once it is acknowledged
// and every batch before it was.
type batch struct {
	chunks []tail.Chunk // lines read, turned into msgs by a publisher, released once settled
	lines  int
	msgs   []bus.Message
	srcs   []string // "file:offset" of each of msgs
	input.Counts
	bytes   int64
	pos     tail.Position
	created time.Time
	done    chan struct{}
	err     error
}

// Input follows an audit log into the bus.
type Input struct {
	cfg     Config
	env     *input.Env
	em      *input.Emitter
	cluster string
	log     *slog.Logger
	store   *checkpoint.Store

	readErr atomic.Pointer[error] // last read error while retrying, nil when healthy
	saveErr atomic.Pointer[error] // last checkpoint save error while it keeps failing

	saveErrors prometheus.Counter
	lastSaved  atomic.Int64 // unix seconds of the last checkpoint saved

	// eventHeader is the header of every event message, shared by all of them: an event is
	// named by cluster/auditID/stage and the node; where in which file it was is only kept
	// for dead letters (a header per message costs the bus about 1 us, ~6% of ingest).
	eventHeader map[string]string

	mu           sync.Mutex
	unacked      []time.Time // creation times of batches not yet acknowledged, oldest first
	unackedBytes int64
	// Acknowledged batches whose position could not be saved (disk full, unwritable
	// directory): they would be read again after a restart, so they still count as lag.
	unsavedSince time.Time
	unsavedBytes int64
	follower     *tail.Follower
}

// New prepares the input; Run does the work.
func New(cfg Config, env *input.Env) (*Input, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	store, err := checkpoint.Open(cfg.CheckpointDir, cfg.Path)
	if err != nil {
		return nil, err
	}
	em := env.Emitter(metrics.File)
	in := &Input{cfg: cfg, env: env, em: em, cluster: env.Cluster, log: em.Logger(), store: store,
		eventHeader: env.Header(metrics.File),
		saveErrors:  prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_ingest_checkpoint_save_errors_total", Help: "Failed saves of the audit log checkpoint (retried until one succeeds)."}),
	}
	if reg := env.Registry; reg != nil {
		stat := func(f func(s *tail.Stats) int64) func() float64 {
			return func() float64 {
				in.mu.Lock()
				fl := in.follower
				in.mu.Unlock()
				if fl == nil {
					return 0
				}
				return float64(f(&fl.Stats))
			}
		}
		reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "auditlens_ingest_lines_read_total", Help: "Lines read from audit log files."},
				stat(func(s *tail.Stats) int64 { return s.LinesRead.Load() })),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "auditlens_ingest_bytes_read_total", Help: "Bytes read from audit log files (decompressed)."},
				stat(func(s *tail.Stats) int64 { return s.BytesRead.Load() })),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "auditlens_ingest_rotations_total", Help: "Rotations of the audit log seen."},
				stat(func(s *tail.Stats) int64 { return s.Rotations.Load() })),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "auditlens_ingest_truncations_total", Help: "Truncations of the audit log seen (copytruncate or other)."},
				stat(func(s *tail.Stats) int64 { return s.Truncations.Load() })),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "auditlens_ingest_lag_bytes", Help: "Bytes of the audit log (active file and rotated files not yet read) not yet acknowledged by the bus and checkpointed."},
				func() float64 { return float64(in.LagBytes()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "auditlens_ingest_checkpoint_age_seconds", Help: "Age of the oldest read batch whose position is not yet saved; 0 when everything read is checkpointed."},
				func() float64 { return in.CheckpointAge().Seconds() }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "auditlens_ingest_checkpoint_last_saved_timestamp_seconds", Help: "When the audit log checkpoint was last saved (Unix time; 0: not yet)."},
				func() float64 { return float64(in.lastSaved.Load()) }),
			in.saveErrors,
		)
	}
	return in, nil
}

// LagBytes is how many bytes of the audit log are not yet acknowledged by the bus.
func (in *Input) LagBytes() int64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.follower == nil {
		return 0
	}
	return in.follower.Lag() + in.unackedBytes + in.unsavedBytes
}

// CheckpointAge is how long the oldest read batch has waited for its position to be saved.
func (in *Input) CheckpointAge() time.Duration {
	in.mu.Lock()
	defer in.mu.Unlock()
	oldest := in.unsavedSince
	if len(in.unacked) > 0 && (oldest.IsZero() || in.unacked[0].Before(oldest)) {
		oldest = in.unacked[0]
	}
	if oldest.IsZero() {
		return 0
	}
	return time.Since(oldest)
}

// Ready reports an error while publishing fails.
func (in *Input) Ready() error {
	if err := in.em.Stuck(); err != nil {
		return err
	}
	if p := in.readErr.Load(); p != nil {
		return fmt.Errorf("reading the audit log: %w", *p)
	}
	if p := in.saveErr.Load(); p != nil {
		return fmt.Errorf("saving the checkpoint: %w", *p)
	}
	return nil
}

// Run follows the audit log until ctx is done, then publishes what it read and saves the
// last acknowledged position.
func (in *Input) Run(ctx context.Context) error {
	start, ok, err := in.store.Load()
	if err != nil {
		return err
	}
	tcfg := tail.DefaultConfig()
	tcfg.Path, tcfg.StartAt, tcfg.MaxLineSize, tcfg.PollInterval, tcfg.Logger = in.cfg.Path, in.cfg.StartAt, in.env.MaxEventSize, in.cfg.PollInterval, in.log
	var sp *tail.Position
	if ok {
		sp = &start
	}
	f := tail.New(tcfg, sp)
	defer f.Close()
	in.mu.Lock()
	in.follower = f
	in.mu.Unlock()

	// Publishing outlives ctx by DrainTimeout so what was read gets acknowledged.
	pubCtx, pubCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer pubCancel()
	stopDrain := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(in.cfg.DrainTimeout, pubCancel)
		<-pubCtx.Done()
		t.Stop()
	})
	defer stopDrain()

	work := make(chan *batch)
	order := make(chan *batch, in.cfg.Publishers+1)
	var wg sync.WaitGroup
	for range in.cfg.Publishers {
		wg.Go(func() {
			for b := range work {
				in.convert(b)
				b.err = in.publish(pubCtx, b)
				close(b.done)
			}
		})
	}
	commitErr := make(chan error, 1)
	go func() { commitErr <- in.commit(order, f) }()

	readErr := in.read(ctx, f, work, order)
	close(work)
	close(order)
	wg.Wait()
	cerr := <-commitErr
	pubCancel()
	if readErr != nil {
		return readErr
	}
	return cerr
}

// read turns lines into batches until ctx is done.
func (in *Input) read(ctx context.Context, f *tail.Follower, work, order chan<- *batch) error {
	var cur *batch
	send := func() bool {
		if cur == nil {
			return true
		}
		b := cur
		cur = nil
		in.mu.Lock()
		in.unacked = append(in.unacked, b.created)
		in.unackedBytes += b.bytes
		in.mu.Unlock()
		select {
		case order <- b:
		case <-ctx.Done():
			// Not handed out: drop it; its lines are read again after a restart.
			in.settled(b)
			return false
		}
		if b.lines == 0 {
			close(b.done)
			return true
		}
		select {
		case work <- b:
			return true
		case <-ctx.Done():
			b.err = ctx.Err()
			close(b.done)
			return false
		}
	}
	// An unreadable file is tried again from one poll interval up to every 10 s.
	retry := backoff.Backoff{Min: in.cfg.PollInterval, Max: 10 * time.Second}
	failures := 0
	var lastPos tail.Position
	for {
		maxLines, maxBytes := in.cfg.BatchSize, in.cfg.BatchBytes
		if cur != nil {
			maxLines -= cur.lines
			maxBytes -= int(cur.bytes)
		}
		c, err := f.Next(ctx, maxLines, maxBytes, cur == nil)
		if err != nil {
			if ctx.Err() != nil {
				send()
				return nil //nolint:nilerr // the read ended because of the shutdown: a clean stop
			}
			// An unreadable file (permissions, I/O error): log, retry, never crash.
			in.log.Error("read audit log", "err", err)
			in.readErr.Store(&err)
			send()
			failures++
			if retry.Wait(ctx, failures) != nil {
				return nil //nolint:nilerr // shut down while waiting to read again: a clean stop
			}
			continue
		}
		failures = 0
		in.readErr.Store(nil)
		// An idle poll reports the same position again: nothing to checkpoint.
		moved := c.Pos.File.Path != "" && !c.Pos.SamePlace(lastPos)
		if c.Pos.File.Path != "" {
			lastPos = c.Pos
		}
		if cur == nil && (len(c.Lines) > 0 || moved) {
			cur = &batch{created: time.Now(), done: make(chan struct{})}
		}
		if cur != nil {
			if c.Pos.File.Path != "" {
				cur.pos = c.Pos
			}
			if len(c.Lines) > 0 {
				cur.chunks = append(cur.chunks, c)
				cur.lines += len(c.Lines)
				for _, l := range c.Lines {
					cur.bytes += int64(len(l.Data)) + 1
				}
			}
		}
		if cur != nil && (c.CaughtUp || cur.lines >= in.cfg.BatchSize || int(cur.bytes) >= in.cfg.BatchBytes || len(c.Lines) == 0) {
			if !send() {
				return nil
			}
		}
	}
}

// convert turns the lines of b into messages (in a publisher, so that identifying events
// runs in parallel with reading). Consecutive events of one file go into EventBatch messages
// (lib/bus/eventbatch) named by the file's fingerprint and the offsets of their first and
// last line: the same lines read again after a crash make the same messages, which the bus
// stores once.
func (in *Input) convert(b *batch) {
	if b.msgs != nil {
		return // a retry
	}
	b.msgs = make([]bus.Message, 0, b.lines)
	b.srcs = make([]string, 0, b.lines)
	var p *packer
	for _, c := range b.chunks {
		if p == nil || p.fp != c.Pos.File.Fingerprint || p.name != c.Name {
			if p != nil {
				p.flush(b)
			}
			p = in.newPacker(c)
		}
		in.add(b, c, p)
	}
	if p != nil {
		p.flush(b)
	}
}

// add converts a chunk's lines into messages of b: events into p's batches (or alone when
// batches are off or the event is too large for one), bad lines into dead letters. The
// sources ("name:offset") and ids of single messages are cut from one string built for the
// chunk: a line costs no string allocation of its own besides what Peek returns.
func (in *Input) add(b *batch, c tail.Chunk, p *packer) {
	fp := c.Pos.File.Fingerprint
	if len(fp) > 16 {
		fp = fp[:16]
	}
	type line struct {
		srcEnd, idEnd int // ends of the line's source and id in text
		err           error
		envelope      []envelope.Item // non-nil: the line is a cloud envelope (envelope.go)
		batched       bool            // a good event that goes into a batch: no text
	}
	lines := make([]line, len(c.Lines))
	var text strings.Builder
	if !p.Fits(1) {
		text.Grow(len(c.Lines) * (len(c.Name) + len(in.cluster) + 80))
	}
	var num [20]byte
	for i, l := range c.Lines {
		err := l.Err
		var ref auditevent.Ref
		if err == nil {
			ref, err = auditevent.Peek(l.Data, in.env.MaxEventSize)
		}
		if err == nil && p.Fits(len(l.Data)) {
			lines[i].batched = true
			lines[i].srcEnd, lines[i].idEnd = text.Len(), text.Len()
			continue
		}
		off := strconv.AppendInt(num[:0], l.Offset, 10)
		text.WriteString(c.Name)
		text.WriteByte(':')
		text.Write(off)
		lines[i].srcEnd = text.Len()
		if err != nil && l.Err == nil {
			lines[i].envelope, err = in.unwrap(l.Data, err)
		}
		if err != nil {
			lines[i].err = err
			text.WriteString(fp) // the dead letter's id: bus.NewDeadLetter adds "file/"
			text.WriteByte('/')
			text.Write(off)
		} else if lines[i].envelope == nil {
			// The id is cluster/auditID/stage: JetStream de-duplicates across the whole stream.
			text.WriteString(in.cluster)
			text.WriteByte('/')
			text.WriteString(ref.AuditID)
			text.WriteByte('/')
			text.WriteString(ref.Stage)
		}
		lines[i].idEnd = text.Len()
	}
	all := text.String()
	start := 0
	for i, l := range c.Lines {
		if lines[i].batched {
			b.Events++
			p.add(b, l.Data, strconv.FormatInt(l.Offset, 10))
			continue
		}
		src, id := all[start:lines[i].srcEnd], all[lines[i].srcEnd:lines[i].idEnd]
		start = lines[i].idEnd
		if items := lines[i].envelope; items != nil {
			in.addEnvelope(b, p, src, fp, l.Offset, items)
			continue
		}
		// The audit ID is the client's Audit-ID header, of any length: bound the message id.
		id = bus.BoundID(id)
		b.srcs = append(b.srcs, src)
		if err := lines[i].err; err != nil {
			label := reason.Of(err)
			in.log.Warn("bad audit log line sent to the dead-letter stream", "source", src, "reason", label, "err", bus.Short(err.Error(), 200))
			b.AddBad(label, 1)
			b.msgs = append(b.msgs, in.env.DeadLetter(in.cluster, metrics.File, id, src, err, l.Data))
			continue
		}
		b.Events++
		b.msgs = append(b.msgs, bus.Message{
			Stream: bus.Events, Cluster: in.cluster, ID: id,
			Header: in.eventHeader,
			Data:   l.Data,
		})
	}
}

// publish stores b on the bus, retrying with backoff while the bus is unavailable: the
// reader stops when every publisher is busy, so nothing is lost and memory stays bounded.
// A message the bus refuses for good is replaced by a bounded dead letter (permanent:
// retrying cannot help) and the rest is published.
func (in *Input) publish(ctx context.Context, b *batch) error {
	return in.em.Store(ctx, b.msgs, &b.Counts, "the file position", "", b.srcs...)
}
