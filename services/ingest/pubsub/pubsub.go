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
	"regexp"
	"sync"
	"time"

	gpubsub "cloud.google.com/go/pubsub/v2"
	"google.golang.org/api/option"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/envelope"
	"github.com/auditlens/auditlens/lib/reason"
	"github.com/auditlens/auditlens/services/ingest/input"
)

// Input is the metrics label of this input.
const Input = "pubsub"

// Config configures the source.
type Config struct {
	// Subscription is projects/<project>/subscriptions/<name>.
	Subscription string
	// MaxOutstanding bounds the messages being stored at once (default 1000).
	MaxOutstanding int
	// ClientOptions are passed to the Pub/Sub client (no flag; tests: the pstest server).
	ClientOptions []option.ClientOption
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

// Source reads one subscription.
type Source struct {
	cfg      Config
	env      *input.Env
	em       *input.Emitter
	client   *gpubsub.Client
	sub      *gpubsub.Subscriber
	decoders sync.Pool
	header   map[string]string
}

// New connects the Pub/Sub client.
func New(ctx context.Context, cfg Config, env *input.Env) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Subscription == "" {
		return nil, errors.New("--pubsub-subscription is empty")
	}
	project := subscriptionRE.FindStringSubmatch(cfg.Subscription)[1]
	client, err := gpubsub.NewClient(ctx, project, cfg.ClientOptions...)
	if err != nil {
		return nil, fmt.Errorf("connect to Pub/Sub: %w", err)
	}
	s := &Source{cfg: cfg, env: env, em: env.Emitter(Input), client: client, header: env.Header(Input)}
	s.sub = client.Subscriber(cfg.Subscription)
	s.sub.ReceiveSettings.MaxOutstandingMessages = cfg.MaxOutstanding
	// The messages held at once (up to 10 MB each) are bounded in bytes too; what they
	// decode to is bounded by env.Budget.
	s.sub.ReceiveSettings.MaxOutstandingBytes = int(min(env.Limits.MaxInflight, 1<<30))
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
func (s *Source) Ready() error { return s.em.Ready() }

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
	lim := s.env.Limit()
	defer lim.Release()
	msgs, counts, err := s.messages(m, lim)
	if err != nil { // envelope.ErrBusy
		s.em.Retry()
		m.Nack()
		return
	}
	if err := s.em.Send(ctx, s.em.Pack(msgs), &counts, "pubsub:"+s.cfg.Subscription+":"+m.ID); err != nil {
		s.em.Retry()
		if ctx.Err() == nil {
			s.em.Failed(err, "the messages are redelivered")
		}
		m.Nack()
		return
	}
	s.em.Failed(nil, "")
	m.Ack()
	s.em.Count(counts)
}

// messages turns one Pub/Sub message into event messages (named cluster/auditID/stage, so
// a redelivery stores nothing twice) or one dead letter, decoding within lim; an error
// (envelope.ErrBusy) means it is to be redelivered.
func (s *Source) messages(m *gpubsub.Message, lim *envelope.Limit) (msgs []bus.Message, c input.Counts, err error) {
	d := s.decoders.Get().(*envelope.Decoder)
	defer func() {
		d.SetLimit(nil)
		d.Trim(keepBuffer)
		s.decoders.Put(d)
	}()
	d.SetLimit(lim)
	dead := func(data []byte, err error) {
		label := reason.Of(err)
		c.AddBad(label, 1)
		s.em.Logger().Warn("bad Pub/Sub message sent to the dead-letter stream", "message", m.ID, "reason", label, "err", bus.Short(err.Error(), 512))
		msgs = append(msgs, s.env.DeadLetter(s.env.Cluster, Input, fmt.Sprintf("%s/%d", m.ID, len(msgs)), "pubsub:"+s.cfg.Subscription+":"+m.ID, err, data))
	}
	items, _, err := d.SplitAny(m.Data, s.env.MaxEventSize)
	if errors.Is(err, envelope.ErrBusy) {
		return nil, input.Counts{}, err
	}
	if err != nil {
		dead(m.Data, err)
		return msgs, c, nil
	}
	for _, it := range items {
		if it.Err != nil {
			dead(it.Raw, it.Err)
			continue
		}
		cluster := it.Origin.ClusterOr(s.env.Cluster)
		c.Events++
		msgs = append(msgs, bus.Message{Stream: bus.Events, Cluster: cluster, ID: bus.EventID(cluster, it.Key()), Header: s.header, Data: it.Raw})
	}
	return msgs, c, nil
}

// keepBuffer is the largest decoder buffer kept for the next message.
const keepBuffer = 4 << 20
