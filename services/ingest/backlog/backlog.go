// Package backlog holds ingest's publishing back while the consumer group of the events
// stream (classify) has more than a bound of messages not yet acknowledged: the bus then
// carries a bounded backlog instead of one that grows with the input, and what is not yet
// published stays where it came from (the audit log on disk, the apiserver's retry).
package backlog

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/lib/backoff"
	"github.com/auditlens/auditlens/lib/bus"
)

// Config bounds the backlog; start from DefaultConfig.
type Config struct {
	// Max is the most messages of the events stream Group may have unacknowledged (not yet
	// delivered, or delivered and not settled) before publishing waits; 0 turns it off.
	Max int64
	// Group is the consumer group whose backlog counts: classify's --classify-group.
	Group string
}

// DefaultConfig is off: a standalone ingest hands everything to the bus, whose retention
// is the buffer for a classify outage (the apiserver deletes rotated audit logs after
// --audit-log-maxbackup files, a bus keeps them --nats-max-age). The all-in-one binary turns
// it on (see services/auditlens/cmd/auditlens).
func DefaultConfig() Config { return Config{Group: "classify"} }

// RegisterFlags adds --bus-max-backlog and --bus-backlog-group to fs, each defaulting to the
// current value of its field.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Int64Var(&c.Max, "bus-max-backlog", c.Max, "hold publishing back while the consumer group --bus-backlog-group has this many `messages` of the events stream unacknowledged, or more; the audit log waits on disk, the webhook answers 429 past --webhook-publish-timeout (0: off, the bus buffers everything)")
	fs.StringVar(&c.Group, "bus-backlog-group", c.Group, "consumer `group` whose backlog --bus-max-backlog bounds (classify's --classify-group; the all-in-one binary uses that)")
}

// On reports whether publishing waits for the backlog.
func (c Config) On() bool { return c.Max > 0 }

// Validate checks the flags, naming the one at fault.
func (c Config) Validate() error {
	if c.Max < 0 {
		return fmt.Errorf("--bus-max-backlog %d: want 0 (off) or more", c.Max)
	}
	if c.On() && c.Group == "" {
		return errors.New("--bus-max-backlog needs --bus-backlog-group: the consumer group whose backlog it bounds")
	}
	return nil
}

// Bus is what the gate needs from the bus: publishing, readiness and the backlog.
type Bus interface {
	bus.Publisher
	bus.BacklogReader
	Ready() error
}

const (
	// refresh is the longest the gate trusts its own count (the backlog read last plus what
	// it published since) while that is below the bound: other publishers (ingest on other
	// nodes) fill the same stream.
	refresh = time.Second
	// logAfter is how long publishing waits without a break before the wait is logged (and
	// then every logEvery); shorter waits are the normal pace of a busy pipeline, counted only.
	logAfter, logEvery = 10 * time.Second, time.Minute
	// stallAfter is how long publishing waits without a break before readiness fails.
	stallAfter = time.Minute
	// readTimeout bounds one backlog request.
	readTimeout = 5 * time.Second
)

// poll spaces the backlog requests of a wait: every 10 ms while the backlog shrank within the
// last idleAfter (classify settles its deliveries in bursts: a bound of a few hundred
// messages may be a second of its work, which a slower look would leave it idle for), then
// backing off to once a second while it does not move (classify stopped).
var poll = backoff.Backoff{Min: 10 * time.Millisecond, Max: time.Second}

const idleAfter = 5 * time.Second

// Gate is a bus.Publisher that, before publishing messages of the events stream, waits while
// the backlog is at or over the bound. Other streams (dead letters) pass at once. A read of
// the backlog that fails does not hold publishing (it is counted and logged).
type Gate struct {
	Bus
	cfg Config
	log *slog.Logger
	// stallAfter is the stallAfter constant (tests shorten it).
	stallAfter time.Duration

	waits, waitSeconds, readErrors prometheus.Counter

	released chan struct{} // closed at shutdown: no more waiting
	stop     sync.Once

	reading sync.Mutex // one backlog request at a time; waiters share its answer

	mu        sync.Mutex
	count     int64     // the backlog read last plus the messages published since
	read      time.Time // when count was last read from the bus
	readValue int64     // the backlog read last, for the gauge
	added     int64     // messages of the events stream published, ever
	holding   time.Time // since when publishing waits without a break; zero: it does not
	logged    time.Time // when the wait was last logged
	lastErr   time.Time // when a failed read was last logged
}

// New wraps b; with cfg off, Publish passes everything through. Its metrics are registered
// on reg (nil: not registered).
func New(cfg Config, b Bus, log *slog.Logger, reg prometheus.Registerer) *Gate {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &Gate{Bus: b, cfg: cfg, log: log.With("part", "backlog"), stallAfter: stallAfter, released: make(chan struct{}),
		waits: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_ingest_backlog_waits_total",
			Help: "Publishes of events that waited because the consumer group's backlog was at --bus-max-backlog."}),
		waitSeconds: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_ingest_backlog_wait_seconds_total",
			Help: "Time publishes of events spent waiting for the consumer group's backlog to shrink below --bus-max-backlog."}),
		readErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_ingest_backlog_read_errors_total",
			Help: "Failed reads of the consumer group's backlog (publishing went on without waiting)."}),
	}
	if reg != nil && cfg.On() {
		reg.MustRegister(g.waits, g.waitSeconds, g.readErrors,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "auditlens_ingest_backlog_messages",
				Help: "Messages of the events stream the consumer group --bus-backlog-group had not acknowledged, when last read (read while publishing nears --bus-max-backlog, at least every second while publishing)."},
				func() float64 {
					g.mu.Lock()
					defer g.mu.Unlock()
					return float64(g.readValue)
				}))
	}
	return g
}

// Publish implements bus.Publisher: it waits while the backlog is at or over the bound (or
// until ctx ends: then the error wraps bus.ErrBacklog), then publishes msgs.
func (g *Gate) Publish(ctx context.Context, msgs ...bus.Message) error {
	n := int64(0)
	for i := range msgs {
		if msgs[i].Stream == bus.Events {
			n++
		}
	}
	if n == 0 || !g.cfg.On() {
		return g.Bus.Publish(ctx, msgs...)
	}
	if err := g.wait(ctx); err != nil {
		return err
	}
	g.mu.Lock()
	g.count += n
	g.added += n
	g.mu.Unlock()
	return g.Bus.Publish(ctx, msgs...)
}

// wait returns once the backlog is below the bound, the gate is released or the backlog
// cannot be read; or ctx's error, wrapped in bus.ErrBacklog.
func (g *Gate) wait(ctx context.Context) error {
	g.mu.Lock()
	fresh := g.count < g.cfg.Max && time.Since(g.read) < refresh
	g.mu.Unlock()
	if fresh || g.isReleased() {
		return nil
	}
	var start, moved time.Time
	prev := int64(-1)
	for attempt := 0; ; {
		asked := time.Now()
		n, err := g.backlog(ctx, asked)
		if err != nil {
			if cerr := ended(ctx); cerr != nil {
				return fmt.Errorf("wait for consumer group %s: %w: %w", g.cfg.Group, bus.ErrBacklog, cerr)
			}
		}
		if err != nil || n < g.cfg.Max || g.isReleased() {
			if !start.IsZero() {
				g.waitSeconds.Add(time.Since(start).Seconds())
			}
			if err == nil && n < g.cfg.Max {
				g.resumed()
			}
			return nil
		}
		if start.IsZero() {
			start = asked
			g.waits.Inc()
			g.held(start)
		}
		g.report(n)
		if n < prev || moved.IsZero() {
			moved = time.Now()
		}
		prev = n
		if time.Since(moved) < idleAfter {
			attempt = 1 // classify is draining: look again soon
		} else {
			attempt++
		}
		t := time.NewTimer(poll.Delay(attempt))
		select {
		case <-t.C:
		case <-g.released:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			g.waitSeconds.Add(time.Since(start).Seconds())
			return fmt.Errorf("wait for consumer group %s: %d messages of the events stream not acknowledged, --bus-max-backlog %d: %w: %w",
				g.cfg.Group, n, g.cfg.Max, bus.ErrBacklog, ctx.Err())
		}
	}
}

// ended is ctx's error, or context.DeadlineExceeded once ctx's deadline has passed although
// ctx has not noticed yet: a client that turns the deadline into a socket deadline (kafka-go)
// can fail a hair before ctx's own timer fires, and that failure is ctx ending, not a backlog
// that cannot be read.
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// backlog returns the backlog read at or after asked (one request serves every waiter),
// counting what was published while the request was out.
func (g *Gate) backlog(ctx context.Context, asked time.Time) (int64, error) {
	g.reading.Lock()
	defer g.reading.Unlock()
	g.mu.Lock()
	if !g.read.Before(asked) {
		n := g.count
		g.mu.Unlock()
		return n, nil
	}
	before := g.added
	g.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	n, err := g.Backlog(rctx, bus.Events, g.cfg.Group)
	cancel()
	if err != nil {
		g.readErrors.Inc()
		g.mu.Lock()
		logIt := time.Since(g.lastErr) >= logEvery
		if logIt {
			g.lastErr = time.Now()
		}
		g.mu.Unlock()
		if logIt && ended(ctx) == nil {
			g.log.Warn("cannot read the consumer group's backlog; publishing without waiting for it", "group", g.cfg.Group, "err", err)
		}
		return 0, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.read, g.readValue = time.Now(), n
	g.count = n + g.added - before
	return g.count, nil
}

// held notes that publishing waits since start, unless it already did.
func (g *Gate) held(start time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.holding.IsZero() {
		g.holding = start
	}
}

// report logs a long wait: first after logAfter without a break, then every logEvery.
func (g *Gate) report(n int64) {
	g.mu.Lock()
	since := g.holding
	logIt := !since.IsZero() && time.Since(since) >= logAfter && time.Since(g.logged) >= logEvery
	if logIt {
		g.logged = time.Now()
	}
	g.mu.Unlock()
	if logIt {
		g.log.Warn("holding audit events back: the consumer group is behind (is classify running?); the audit log waits on disk, the webhook answers 429",
			"group", g.cfg.Group, "backlog", n, "max_backlog", g.cfg.Max, "waiting", time.Since(since).Round(time.Second))
	}
}

// resumed ends a wait; a wait that was logged logs its end.
func (g *Gate) resumed() {
	g.mu.Lock()
	since, logged := g.holding, !g.logged.IsZero() && g.logged.After(g.holding)
	g.holding = time.Time{}
	g.mu.Unlock()
	if !since.IsZero() && logged {
		g.log.Info("publishing again: the consumer group's backlog is below --bus-max-backlog", "group", g.cfg.Group, "waited", time.Since(since).Round(time.Second))
	}
}

func (g *Gate) isReleased() bool {
	select {
	case <-g.released:
		return true
	default:
		return false
	}
}

// Run waits for ctx, then releases the gate, so that what the inputs read still reaches the
// bus (a few batches past the bound) and is checkpointed at shutdown; nothing waits for a
// classify that is stopped too. Run it as a stage before the inputs: stages stop upstream
// first.
func (g *Gate) Run(ctx context.Context) error {
	<-ctx.Done()
	g.stop.Do(func() { close(g.released) })
	return nil
}

// Stalled is the gate's readiness (Ready stays the bus's): it fails while publishing has waited
// for more than a minute without a break (the consumer group is stopped or far slower than
// the input); the short waits of a busy pipeline do not count.
func (g *Gate) Stalled() error {
	g.mu.Lock()
	since := g.holding
	g.mu.Unlock()
	if !since.IsZero() && time.Since(since) > g.stallAfter {
		return fmt.Errorf("publishing has waited %s for consumer group %s to acknowledge the events backlog below --bus-max-backlog %d",
			time.Since(since).Round(time.Second), g.cfg.Group, g.cfg.Max)
	}
	return nil
}
