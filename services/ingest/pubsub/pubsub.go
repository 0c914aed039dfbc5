// Package pubsub is ingest's Google Cloud Pub/Sub source: it reads the subscription a Cloud
// Logging sink feeds with GKE audit log entries (one LogEntry JSON per message) and
// acknowledges each message only after the bus has stored its event, so that Pub/Sub
// redelivers whatever was not stored.
package pubsub

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"time"

	gpubsub "cloud.google.com/go/pubsub/v2"
	"google.golang.org/api/option"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/lib/envelope"
	"github.com/auditlens/auditlens/lib/reason"
	"github.com/auditlens/auditlens/services/ingest/metrics"
)

// Input is the metrics label of this input.
const Input = "pubsub"

// Config configures the source.
type Config struct {
	// Subscription is projects/<project>/subscriptions/<name>.
	Subscription string
	// MaxOutstanding bounds the messages being stored at once (default 1000).
	MaxOutstanding int
}

// DefaultConfig is the source's defaults; off until Subscription is set.
func DefaultConfig() Config { return Config{MaxOutstanding: 1000} }

// RegisterFlags adds the --pubsub-* flags to fs, each defaulting to the current value of its
// field.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Subscription, "pubsub-subscription", c.Subscription, "read GKE audit logs from this Pub/Sub `projects/P/subscriptions/S` (fed by a Cloud Logging sink; credentials: Application Default Credentials or workload identity; PUBSUB_EMULATOR_HOST honoured) (empty: off)")
	fs.IntVar(&c.MaxOutstanding, "pubsub-max-outstanding", c.MaxOutstanding, "Pub/Sub messages being stored on the bus at once")
}

// On reports whether the source is configured.
func (c Config) On() bool { return c.Subscription != "" }

var subscriptionRE = regexp.MustCompile(`^projects/([^/]+)/subscriptions/[^/]+$`)

// Validate checks the flags when the source is on.
func (c Config) Validate() error {
	if c.Subscription == "" {
		return nil
	}
	if !subscriptionRE.MatchString(c.Subscription) {
		return fmt.Errorf("--pubsub-subscription %q: want projects/PROJECT/subscriptions/NAME", c.Subscription)
	}
	if c.MaxOutstanding <= 0 {
		return fmt.Errorf("--pubsub-max-outstanding %d: want a positive number", c.MaxOutstanding)
	}
	return nil
}

// Bus is what the source needs from the bus.
type Bus interface {
	bus.Publisher
	Ready() error
}

// Options are the source's collaborators.
type Options struct {
	// Cluster names events whose entry names no cluster (resource.labels.cluster_name).
	Cluster      string
	Node         string
	MaxEventSize int
	Logger       *slog.Logger
	Metrics      *metrics.Ingest
	// Batch packs the events of what the source publishes at once into EventBatch messages
	// (lib/bus/eventbatch.Pack); the zero value is eventbatch.DefaultConfig.
	Batch eventbatch.Config
	// Limits bound what a message decodes to (MaxDecoded) and, with Budget, what the
	// messages in flight hold; the zero value is envelope.DefaultLimits.
	Limits envelope.Limits
	// Budget is shared with the other managed sources (nil: one of Limits.MaxInflight bytes
	// for this source alone).
	Budget *envelope.Budget
	// ClientOptions are passed to the Pub/Sub client (tests: the pstest server).
	ClientOptions []option.ClientOption
}

// Source reads one subscription.
type Source struct {
	cfg      Config
	opt      Options
	bus      Bus
	client   *gpubsub.Client
	sub      *gpubsub.Subscriber
	decoders sync.Pool
	header   map[string]string
}

// New connects the Pub/Sub client.
func New(ctx context.Context, cfg Config, b Bus, opt Options) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Subscription == "" {
		return nil, errors.New("--pubsub-subscription is empty")
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Metrics == nil {
		opt.Metrics = metrics.New(nil)
	}
	opt.Batch = opt.Batch.OrDefault()
	if opt.Limits == (envelope.Limits{}) {
		opt.Limits = envelope.DefaultLimits()
	}
	if err := opt.Limits.Validate(); err != nil {
		return nil, err
	}
	if opt.Budget == nil {
		opt.Budget = envelope.NewBudget(opt.Limits.MaxInflight)
	}
	project := subscriptionRE.FindStringSubmatch(cfg.Subscription)[1]
	client, err := gpubsub.NewClient(ctx, project, opt.ClientOptions...)
	if err != nil {
		return nil, fmt.Errorf("connect to Pub/Sub: %w", err)
	}
	s := &Source{cfg: cfg, opt: opt, bus: b, client: client, header: map[string]string{bus.HeaderNode: opt.Node}}
	s.sub = client.Subscriber(cfg.Subscription)
	s.sub.ReceiveSettings.MaxOutstandingMessages = cfg.MaxOutstanding
	// The messages held at once (up to 10 MB each) are bounded in bytes too; what they
	// decode to is bounded by opt.Budget.
	s.sub.ReceiveSettings.MaxOutstandingBytes = int(min(opt.Limits.MaxInflight, 1<<30))
	// Recovery time after a crash: the client extends the ack deadline of what it holds by at
	// most this much at a time, so Pub/Sub redelivers what a dead ingest held within about
	// 10 s (the least Pub/Sub allows) rather than after the client's adaptive deadline (up
	// to 10 minutes).
	s.sub.ReceiveSettings.MaxDurationPerAckExtension = 10 * time.Second
	s.decoders.New = func() any { return envelope.NewDecoder(0) }
	return s, nil
}

// Ready reports an error while publishing fails (retried, or answered with a retryable
// error), or the bus is not ready.
func (s *Source) Ready() error {
	if err := s.opt.Metrics.Stuck(Input); err != nil {
		return err
	}
	return s.bus.Ready()
}

// Run receives until ctx is cancelled; messages being stored then are not acknowledged
// (Pub/Sub redelivers them), and the client is closed.
func (s *Source) Run(ctx context.Context) error {
	defer s.client.Close()
	err := s.sub.Receive(ctx, s.handle)
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("receive from %s: %w", s.cfg.Subscription, err)
	}
	return nil
}

// handle stores one message's events (or its dead letter), then acknowledges it; a failed
// publish, or a message that would take the decoded bytes in flight past their limit, nacks
// it for redelivery.
func (s *Source) handle(ctx context.Context, m *gpubsub.Message) {
	lim := &envelope.Limit{Max: s.opt.Limits.MaxDecoded, Budget: s.opt.Budget}
	defer lim.Release()
	msgs, events, bad, err := s.messages(m, lim)
	if err != nil { // envelope.ErrBusy
		s.opt.Metrics.Retries.WithLabelValues(Input).Inc()
		m.Nack()
		return
	}
	msgs = eventbatch.Pack(s.opt.Batch, msgs)
	if len(msgs) > 0 {
		err := bus.PublishOrDeadLetter(ctx, s.bus, msgs, bus.RefusedDeadLetter(msgs, "pubsub", "pubsub:"+s.cfg.Subscription+":"+m.ID, s.opt.Node, func(dm *bus.Message, err error) {
			s.opt.Logger.Warn("Pub/Sub event the bus refuses sent to the dead-letter stream", "message", m.ID, "bytes", len(dm.Data), "id", bus.Short(dm.ID, 100), "err", bus.Short(err.Error(), 300))
			if dm.Stream == bus.Events {
				events -= eventbatch.Count(dm.Header)
			}
			bad = metrics.Refused(err)
		}))
		if err != nil {
			s.opt.Metrics.Retries.WithLabelValues(Input).Inc()
			if ctx.Err() == nil {
				s.opt.Metrics.SetStuck(Input, err)
				s.opt.Logger.Warn("publish failed; the message is redelivered", "message", m.ID, "err", err)
			}
			m.Nack()
			return
		}
	}
	s.opt.Metrics.SetStuck(Input, nil)
	m.Ack()
	s.opt.Metrics.Published.WithLabelValues(Input).Add(float64(events))
	if bad != "" {
		s.opt.Metrics.Bad.WithLabelValues(Input, bad).Inc()
	}
}

// messages turns one Pub/Sub message into event messages (named cluster/auditID/stage, so
// a redelivery stores nothing twice) or one dead letter, decoding within lim; an error
// (envelope.ErrBusy) means it is to be redelivered.
func (s *Source) messages(m *gpubsub.Message, lim *envelope.Limit) (msgs []bus.Message, events int, bad string, err error) {
	d := s.decoders.Get().(*envelope.Decoder)
	defer func() {
		d.SetLimit(nil)
		d.Trim(keepBuffer)
		s.decoders.Put(d)
	}()
	d.SetLimit(lim)
	dead := func(data []byte, err error) {
		bad = reason.Of(err)
		s.opt.Logger.Warn("bad Pub/Sub message sent to the dead-letter stream", "message", m.ID, "reason", bad, "err", bus.Short(err.Error(), 512))
		msgs = append(msgs, bus.NewDeadLetter(s.opt.Cluster, "pubsub", fmt.Sprintf("%s/%d", m.ID, len(msgs)),
			"pubsub:"+s.cfg.Subscription+":"+m.ID, err, data, map[string]string{bus.HeaderNode: s.opt.Node}))
	}
	items, _, err := d.SplitAny(m.Data, s.opt.MaxEventSize)
	if errors.Is(err, envelope.ErrBusy) {
		return nil, 0, "", err
	}
	if err != nil {
		dead(m.Data, err)
		return msgs, 0, bad, nil
	}
	for _, it := range items {
		if it.Err != nil {
			dead(it.Raw, it.Err)
			continue
		}
		cluster := it.Origin.ClusterOr(s.opt.Cluster)
		events++
		msgs = append(msgs, bus.Message{Stream: bus.Events, Cluster: cluster, ID: bus.EventID(cluster, it.Key()), Header: s.header, Data: it.Raw})
	}
	return msgs, events, bad, nil
}

// keepBuffer is the largest decoder buffer kept for the next message.
const keepBuffer = 4 << 20
