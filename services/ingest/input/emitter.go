package input

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/lib/backoff"
	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/lib/envelope"
	"github.com/auditlens/auditlens/services/ingest/metrics"
)

// Counts is what a publish holds besides its messages: how many of them are audit events,
// and the bad items (dead letters) per reason label.
type Counts struct {
	Events int
	Bad    map[string]int
}

// AddBad counts n bad items under label.
func (c *Counts) AddBad(label string, n int) {
	if c.Bad == nil {
		c.Bad = map[string]int{}
	}
	c.Bad[label] += n
}

// Add adds o to c.
func (c *Counts) Add(o Counts) {
	c.Events += o.Events
	for label, n := range o.Bad {
		c.AddBad(label, n)
	}
}

// Emitter is how one input publishes: it packs events into batches, publishes them or
// dead-letters what the bus refuses for good, and counts under the input's label, the same
// for every input.
type Emitter struct {
	env       *Env
	input     string
	log       *slog.Logger
	published prometheus.Counter
	retries   prometheus.Counter
	failing   atomic.Bool
}

// Emitter returns the emitter of input, named by its metrics label (and its dead letters'
// stage): "file", "webhook", "firehose", "pubsub", "kafka", "cloudwatch".
func (e *Env) Emitter(input string) *Emitter {
	return &Emitter{env: e, input: input, log: e.Logger.With("input", input),
		published: e.Metrics.Published.WithLabelValues(input), retries: e.Metrics.Retries.WithLabelValues(input)}
}

// Logger is the env's logger with the input's label.
func (em *Emitter) Logger() *slog.Logger { return em.log }

// Pack packs the event messages of msgs into EventBatch messages (eventbatch.Pack).
func (em *Emitter) Pack(msgs []bus.Message) []bus.Message { return eventbatch.Pack(em.env.Batch, msgs) }

// Stream packs event messages as they are added (eventbatch.Stream): a source decoding a large
// request holds the batches, not every event twice.
func (em *Emitter) Stream(capacity int) *eventbatch.Stream {
	return eventbatch.NewStream(em.env.Batch, capacity)
}

// Send publishes msgs once. A message the bus refuses for good (its size, a cluster name it
// cannot carry) is replaced by its dead letter, named by srcs[i] when srcs are given (one per
// message), else its HeaderSource, else source; its events move from c.Events to c.Bad. The
// others are stored. The bus's other errors are returned as they are (retry with the same
// msgs). Nothing is counted: see Count.
func (em *Emitter) Send(ctx context.Context, msgs []bus.Message, c *Counts, source string, srcs ...string) error {
	if len(msgs) == 0 {
		return nil
	}
	return bus.PublishOrDeadLetter(ctx, em.env.Bus, msgs, func(i int, err error) bus.Message {
		m := &msgs[i]
		src := m.Header[bus.HeaderSource]
		if i < len(srcs) {
			src = srcs[i]
		}
		if src == "" {
			src = source
		}
		if m.Stream == bus.Events {
			n := eventbatch.Count(m.Header) // a batch refused is all its events
			c.Events -= n
			c.AddBad(metrics.Refused(err), n)
			if eventbatch.IsBatch(m.Header) && errors.Is(err, bus.ErrTooLarge) {
				em.log.Error("batch of events larger than the bus accepts; sent to the dead-letter stream (lower --bus-batch-max-bytes below the bus's max payload)",
					"source", bus.Short(src, 300), "bytes", len(m.Data), "events", n)
			} else {
				em.log.Warn("event the bus refuses sent to the dead-letter stream", "source", bus.Short(src, 300), "bytes", len(m.Data), "id", bus.Short(m.ID, 100), "err", bus.Short(err.Error(), 300))
			}
		}
		if errors.Is(err, bus.ErrInvalid) && !errors.Is(err, bus.ErrTooLarge) {
			return em.env.DeadLetter(m.Cluster, em.input, "invalid/"+m.ID, src, err, m.Data)
		}
		return em.env.DeadLetter(m.Cluster, em.input, "too-large/"+m.ID, src, bus.TooLargeCause(len(m.Data), err), m.Data)
	})
}

// Count adds c to the input's counters of published events and bad items.
func (em *Emitter) Count(c Counts) {
	em.published.Add(float64(c.Events))
	for label, n := range c.Bad {
		em.env.Metrics.Bad.WithLabelValues(em.input, label).Add(float64(n))
	}
}

// Publish is Send, then Count when the bus stored everything.
func (em *Emitter) Publish(ctx context.Context, msgs []bus.Message, c Counts, source string) error {
	if err := em.Send(ctx, msgs, &c, source); err != nil {
		return err
	}
	em.Count(c)
	return nil
}

// Retry counts a publish that failed and is to be retried: by the input (file, kafka,
// cloudwatch), by the sender after a retryable answer (webhook, firehose) or a nack (pubsub).
func (em *Emitter) Retry() { em.retries.Inc() }

// Answer counts an HTTP input's answer with code.
func (em *Emitter) Answer(code int) {
	em.env.Metrics.Requests.WithLabelValues(em.input, strconv.Itoa(code)).Inc()
}

// Failed records that publishing fails with err (nil: it works again), logging the first
// failure and the recovery; Ready reports it meanwhile.
func (em *Emitter) Failed(err error, what string) {
	em.env.Metrics.SetStuck(em.input, err)
	switch {
	case err != nil && !em.failing.Swap(true):
		em.log.Warn("publish failed; "+what, "err", bus.Short(err.Error(), 500))
	case err == nil && em.failing.Swap(false):
		em.log.Info("publishing again")
	}
}

// Stuck is why the input's publishing fails now (see Failed), nil when it does not.
func (em *Emitter) Stuck() error { return em.env.Metrics.Stuck(em.input) }

// Ready reports an error while the input's publishing fails (see Failed), or the bus is not
// ready.
func (em *Emitter) Ready() error {
	if err := em.Stuck(); err != nil {
		return err
	}
	return em.env.Bus.Ready()
}

// Store publishes msgs until the bus stored all of them (see Send), retrying with back-off
// while it fails, each retry counted and the input stuck meanwhile, or until ctx ends.
// what names what the input holds while it retries ("the file position").
func (em *Emitter) Store(ctx context.Context, msgs []bus.Message, c *Counts, what, source string, srcs ...string) error {
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for attempt := 1; ; attempt++ {
		err := em.Send(ctx, msgs, c, source, srcs...)
		if err == nil {
			em.Failed(nil, "")
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		em.Retry()
		em.Failed(err, "holding "+what+" and retrying")
		if err := retry.Wait(ctx, attempt); err != nil {
			return err
		}
	}
}

// PublishUntilStored is Store, then Count. The caller acknowledges its own source only when
// it returns nil.
func (em *Emitter) PublishUntilStored(ctx context.Context, msgs []bus.Message, c Counts, what, source string) error {
	if err := em.Store(ctx, msgs, &c, what, source); err != nil {
		return err
	}
	em.Count(c)
	return nil
}

// Converted is what a pulling source made of one record: event messages and dead letters,
// and their Counts. Err wrapping envelope.ErrBusy means the record could not be decoded now:
// the decoded bytes in flight are at their limit.
type Converted struct {
	Msgs []bus.Message
	Counts
	Err error
}

// PublishRecords publishes what convert makes of records 0..n-1 (with PublishUntilStored), in
// runs whose decoded bytes lim bounds: each record decodes within lim.Max (lim is Reset before
// each), and when the budget of lim is spent the run so far is published and its bytes given
// back before the next record is decoded (or, when other sources hold the budget, after a
// wait). With perRecord each record's messages are packed on their own: a Kafka record is the
// same after a restart, a run is not; else a run is packed as one (a CloudWatch page, read
// again the same after a restart).
func (em *Emitter) PublishRecords(ctx context.Context, what, source string, perRecord bool, lim *envelope.Limit, n int, convert func(i int) Converted) error {
	defer lim.Release()
	var msgs []bus.Message
	var run Counts
	flush := func() error {
		if len(msgs) == 0 && len(run.Bad) == 0 {
			return nil
		}
		if !perRecord {
			msgs = em.Pack(msgs)
		}
		err := em.PublishUntilStored(ctx, msgs, run, what, source)
		msgs, run = nil, Counts{}
		lim.Release()
		return err
	}
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	waits := 0
	for i := 0; i < n; {
		lim.Reset()
		c := convert(i)
		if errors.Is(c.Err, envelope.ErrBusy) {
			if len(msgs) > 0 {
				if err := flush(); err != nil {
					return err
				}
				continue
			}
			waits++
			if err := retry.Wait(ctx, waits); err != nil {
				return err
			}
			continue
		}
		waits = 0
		if perRecord {
			c.Msgs = em.Pack(c.Msgs)
		}
		msgs = append(msgs, c.Msgs...)
		run.Add(c.Counts)
		i++
	}
	return flush()
}
