package natsbus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/auditlens/auditlens/lib/bus"
)

// Consumer implements bus.Bus: a durable pull consumer named after group, shared by replicas.
func (b *Bus) Consumer(s bus.Stream, group string, o bus.ConsumerOptions) (bus.Consumer, error) {
	if group == "" || strings.ContainsAny(group, ".*> \t") {
		return nil, fmt.Errorf("consumer group %q: use letters, digits, '-' or '_'", group)
	}
	o = o.WithDefaults()
	return &consumer{b: b, stream: s, opts: o, cfg: jetstream.ConsumerConfig{
		Durable:       group,
		FilterSubject: "auditlens." + string(s) + ".>",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       o.AckWait,
		MaxAckPending: o.MaxUnacked,
		// The handler sees a message at most o.MaxDeliver times (bus.BoundDeliveries); the
		// server's own bound leaves room for the delivery that dead-letters it, and for
		// retries of that while the dead-letter stream is unavailable.
		MaxDeliver:    o.MaxDeliver + deadLetterAttempts,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}}, nil
}

// deadLetterAttempts is how many deliveries past ConsumerOptions.MaxDeliver the server
// still makes, for bus.BoundDeliveries to dead-letter the message (retried every 5 s).
const deadLetterAttempts = 60

type consumer struct {
	b      *Bus
	stream bus.Stream
	opts   bus.ConsumerOptions
	cfg    jetstream.ConsumerConfig
}

func (c *consumer) Consume(ctx context.Context, h bus.Handler) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	cons, err := c.b.js.CreateOrUpdateConsumer(cctx, StreamName(c.stream), c.cfg)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil //nolint:nilerr // cancelled while creating: a clean stop, not a failure
		}
		return fmt.Errorf("create consumer %s on %s: %w", c.cfg.Durable, StreamName(c.stream), err)
	}
	log := c.b.cfg.Logger
	batch := min(c.cfg.MaxAckPending, 1000)
	h = bus.BoundDeliveries(c.b, c.stream, c.opts, h)
	held := newHolding()
	kctx, stopKeepAlive := context.WithCancel(context.Background())
	defer stopKeepAlive()
	go held.keepAlive(kctx, progressInterval(c.opts.AckWait))
	closed, err := consumeRepulling(ctx, cons, func(m jetstream.Msg) {
		d := &bus.Delivery{Acker: held.track(m)}
		d.Stream = c.stream
		d.Data = m.Data()
		hdr := m.Headers()
		// The cluster is the subject's last token, the id JetStream's own de-duplication key;
		// messages from earlier auditlens builds carried both in headers of their own.
		if subj := m.Subject(); strings.LastIndexByte(subj, '.') >= 0 {
			d.Cluster = subj[strings.LastIndexByte(subj, '.')+1:]
		}
		if d.ID = hdr.Get(jetstream.MsgIDHeader); d.ID == "" {
			d.ID = hdr.Get(bus.HeaderMsgID)
		}
		if c := hdr.Get(bus.HeaderCluster); c != "" {
			d.Cluster = c
		}
		if len(hdr) > 0 {
			d.Header = make(map[string]string, len(hdr))
			for k := range hdr {
				d.Header[k] = hdr.Get(k)
			}
		}
		if md, err := m.Metadata(); err == nil {
			d.Position = md.Stream + ":" + strconv.FormatUint(md.Sequence.Stream, 10)
			d.Delivered = int(md.NumDelivered)
		} else {
			d.Position = m.Subject()
			d.Delivered = 1
		}
		h(ctx, d)
	}, func(err error) {
		log.Debug("nats consume", "consumer", c.cfg.Durable, "err", err)
	}, jetstream.PullMaxMessagesWithBytesLimit(batch, c.pullBytes()))
	switch {
	case err != nil:
		return fmt.Errorf("consume %s: %w", c.cfg.Durable, err)
	case closed && ctx.Err() == nil:
		return fmt.Errorf("consumer %s closed: %w", c.cfg.Durable, bus.ErrUnavailable)
	}
	return nil // cancelled: a clean stop
}

// pullBytes bounds the bytes of deliveries buffered for the consumer: far below what the
// server buffers for one client (64 MiB, past which it drops the connection as a slow
// consumer), and never below two of the largest messages the server accepts.
func (c *consumer) pullBytes() int {
	return max(16<<20, 2*int(c.b.nc.MaxPayload()))
}

// Backlog implements bus.BacklogReader with one consumer info request: the messages not yet
// delivered to group plus those delivered and not acknowledged. Before the group's durable
// consumer exists (its first Consume creates it, delivering from the start), it is every
// message of the stream.
func (b *Bus) Backlog(ctx context.Context, s bus.Stream, group string) (int64, error) {
	c, err := b.js.Consumer(ctx, StreamName(s), group)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		st, err := b.js.Stream(ctx, StreamName(s))
		if err != nil {
			return 0, fmt.Errorf("read the backlog of %s on %s: %w", group, StreamName(s), err)
		}
		return int64(st.CachedInfo().State.Msgs), nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the backlog of %s on %s: %w", group, StreamName(s), err)
	}
	info := c.CachedInfo()
	return int64(info.NumPending) + int64(info.NumAckPending), nil
}
