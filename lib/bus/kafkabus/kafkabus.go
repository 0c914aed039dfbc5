// Package kafkabus implements bus.Bus on Kafka with segmentio/kafka-go: one topic per stream,
// key = cluster, consumer groups, offsets committed only up to the last contiguous settled message.
package kafkabus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/auditlens/auditlens/lib/bus"
)

// Topic is the Kafka topic of stream s: auditlens.events, auditlens.findings, auditlens.deadletter.
func Topic(s bus.Stream) string { return "auditlens." + string(s) }

// Config configures the Kafka connection.
type Config struct {
	Brokers []string
	// CreateTopics creates missing topics at Open (needs the right to do so).
	CreateTopics bool
	// Partitions of created topics (default 6).
	Partitions int
	// ReplicationFactor of created topics (default 1).
	ReplicationFactor int
	Logger            *slog.Logger
}

// Validate reports the first configuration error.
func (c *Config) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("--kafka-brokers is empty")
	}
	for _, b := range c.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return fmt.Errorf("--kafka-brokers %q: want host:port", b)
		}
	}
	return nil
}

// Bus is a bus.Bus on Kafka.
type Bus struct {
	cfg       Config
	w         *kafka.Writer
	closeOnce sync.Once
}

var _ bus.Bus = (*Bus)(nil)

// Open checks the brokers answer and creates the topics when configured to.
func Open(ctx context.Context, cfg Config) (*Bus, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = 6
	}
	if cfg.ReplicationFactor <= 0 {
		cfg.ReplicationFactor = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	b := &Bus{cfg: cfg, w: &kafka.Writer{
		Addr:         kafka.TCP(cfg.Brokers...),
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: 2 * time.Millisecond,
		BatchSize:    1000,
		BatchBytes:   16 << 20,
		MaxAttempts:  5,
	}}
	if err := b.ping(ctx); err != nil {
		return nil, err
	}
	if cfg.CreateTopics {
		if err := b.createTopics(ctx); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func (b *Bus) dial(ctx context.Context) (*kafka.Conn, error) {
	var last error
	for _, addr := range b.cfg.Brokers {
		d := kafka.Dialer{Timeout: 5 * time.Second}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, fmt.Errorf("dial kafka %v: %w: %w", b.cfg.Brokers, bus.ErrUnavailable, last)
}

func (b *Bus) ping(ctx context.Context) error {
	c, err := b.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Brokers(); err != nil {
		return fmt.Errorf("kafka metadata: %w: %w", bus.ErrUnavailable, err)
	}
	return nil
}

func (b *Bus) createTopics(ctx context.Context) error {
	c, err := b.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	ctrl, err := c.Controller()
	if err != nil {
		return fmt.Errorf("find kafka controller: %w", err)
	}
	cc, err := kafka.DialContext(ctx, "tcp", net.JoinHostPort(ctrl.Host, strconv.Itoa(ctrl.Port)))
	if err != nil {
		return fmt.Errorf("dial kafka controller: %w", err)
	}
	defer cc.Close()
	var cfgs []kafka.TopicConfig
	for _, s := range bus.Streams {
		cfgs = append(cfgs, kafka.TopicConfig{Topic: Topic(s), NumPartitions: b.cfg.Partitions, ReplicationFactor: b.cfg.ReplicationFactor})
	}
	if err := cc.CreateTopics(cfgs...); err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
		return fmt.Errorf("create topics: %w", err)
	}
	return nil
}

// Publish implements bus.Publisher; it returns once every message is acknowledged by all
// in-sync replicas.
func (b *Bus) Publish(ctx context.Context, msgs ...bus.Message) error {
	km := make([]kafka.Message, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		if err := m.Validate(); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		h := make([]kafka.Header, 0, len(m.Header)+2)
		h = append(h, kafka.Header{Key: bus.HeaderCluster, Value: []byte(m.Cluster)}, kafka.Header{Key: bus.HeaderMsgID, Value: []byte(m.ID)})
		for k, v := range m.Header {
			h = append(h, kafka.Header{Key: k, Value: []byte(v)})
		}
		km[i] = kafka.Message{Topic: Topic(m.Stream), Key: []byte(m.Cluster), Value: m.Data, Headers: h}
	}
	if err := b.w.WriteMessages(ctx, km...); err != nil {
		return fmt.Errorf("publish to kafka: %w: %w", bus.ErrUnavailable, err)
	}
	return nil
}

// Ready implements bus.Bus by asking a broker for metadata.
func (b *Bus) Ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return b.ping(ctx)
}

// Close implements bus.Bus.
func (b *Bus) Close() error {
	var err error
	b.closeOnce.Do(func() { err = b.w.Close() })
	return err
}

// Consumer implements bus.Bus with a consumer group named group.
func (b *Bus) Consumer(s bus.Stream, group string, o bus.ConsumerOptions) (bus.Consumer, error) {
	if group == "" {
		return nil, errors.New("consumer group is empty")
	}
	return &consumer{b: b, stream: s, group: group, opts: o.WithDefaults()}, nil
}

type consumer struct {
	b      *Bus
	stream bus.Stream
	group  string
	opts   bus.ConsumerOptions
}

// Consume reads with FetchMessage and commits, per partition, the highest offset below which
// every message has been settled.
func (c *consumer) Consume(ctx context.Context, h bus.Handler) error {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:           c.b.cfg.Brokers,
		GroupID:           c.group,
		Topic:             Topic(c.stream),
		MinBytes:          1,
		MaxBytes:          16 << 20,
		MaxWait:           250 * time.Millisecond,
		StartOffset:       kafka.FirstOffset,
		HeartbeatInterval: time.Second,
		SessionTimeout:    10 * time.Second,
		RebalanceTimeout:  10 * time.Second,
		CommitInterval:    0,
	})
	defer r.Close()
	tr := newTracker()
	sem := make(chan struct{}, c.opts.MaxUnacked)
	commitErr := make(chan error, 1)
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		case err := <-commitErr:
			return err
		}
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("fetch from %s: %w: %w", Topic(c.stream), bus.ErrUnavailable, err)
		}
		tr.add(m.Partition, m.Offset)
		d := &bus.Delivery{Delivered: 1, Position: fmt.Sprintf("%s/%d@%d", m.Topic, m.Partition, m.Offset)}
		d.Stream, d.Data = c.stream, m.Value
		d.Header = make(map[string]string, len(m.Headers))
		for _, hd := range m.Headers {
			d.Header[hd.Key] = string(hd.Value)
		}
		d.Cluster, d.ID = d.Header[bus.HeaderCluster], d.Header[bus.HeaderMsgID]
		d.Acker = &acker{settle: func(ctx context.Context) error {
			<-sem
			upTo, ok := tr.done(m.Partition, m.Offset)
			if !ok {
				return nil
			}
			err := r.CommitMessages(ctx, kafka.Message{Topic: m.Topic, Partition: m.Partition, Offset: upTo})
			if err != nil {
				select {
				case commitErr <- fmt.Errorf("commit %s/%d@%d: %w", m.Topic, m.Partition, upTo, err):
				default:
				}
			}
			return err
		}, redeliver: func(delay time.Duration) {
			time.AfterFunc(delay, func() {
				if ctx.Err() == nil {
					d.Delivered++
					h(ctx, d)
				}
			})
		}}
		h(ctx, d)
	}
}

type acker struct {
	once      sync.Once
	settle    func(context.Context) error
	redeliver func(time.Duration)
}

func (a *acker) Ack(ctx context.Context) error {
	var err error
	a.once.Do(func() { err = a.settle(ctx) })
	return err
}

// Nak redelivers the message to this consumer after delay; Kafka offsets cannot move past an
// unsettled message, so nothing later in its partition is committed meanwhile.
func (a *acker) Nak(delay time.Duration) error {
	a.redeliver(max(delay, 100*time.Millisecond))
	return nil
}

// Term settles a poison message so the partition can move on.
func (a *acker) Term(string) error { return a.Ack(context.Background()) }

// tracker finds, per partition, the offset up to which every fetched message is settled.
type tracker struct {
	mu    sync.Mutex
	parts map[int]*partState
}

type partState struct {
	pending []int64        // fetched offsets in order, not yet committed
	settled map[int64]bool // settled offsets among pending
}

func newTracker() *tracker { return &tracker{parts: map[int]*partState{}} }

func (t *tracker) add(p int, off int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ps := t.parts[p]
	if ps == nil {
		ps = &partState{settled: map[int64]bool{}}
		t.parts[p] = ps
	}
	ps.pending = append(ps.pending, off)
}

// done marks off settled and returns the highest offset that may now be committed.
func (t *tracker) done(p int, off int64) (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ps := t.parts[p]
	if ps == nil {
		return 0, false
	}
	ps.settled[off] = true
	upTo, ok := int64(0), false
	for len(ps.pending) > 0 && ps.settled[ps.pending[0]] {
		upTo, ok = ps.pending[0], true
		delete(ps.settled, ps.pending[0])
		ps.pending = ps.pending[1:]
	}
	return upTo, ok
}
