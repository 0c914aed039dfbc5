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
	if c.Partitions < 0 || c.Partitions > 10000 {
		return fmt.Errorf("--kafka-partitions %d: want 1 to 10000", c.Partitions)
	}
	if c.ReplicationFactor < 0 || c.ReplicationFactor > 16 {
		return fmt.Errorf("--kafka-replication-factor %d: want 1 to 16", c.ReplicationFactor)
	}
	return nil
}

// Bus is a bus.Bus on Kafka.
type Bus struct {
	cfg       Config
	w         *kafka.Writer
	transport *kafka.Transport
	closeOnce sync.Once
}

var (
	_ bus.Bus           = (*Bus)(nil)
	_ bus.BacklogReader = (*Bus)(nil)
)

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
	// The writer gets a transport of its own, not kafka-go's process-wide default, so that
	// Close can end its connections (and their goroutines) too.
	transport := &kafka.Transport{}
	b := &Bus{cfg: cfg, transport: transport, w: &kafka.Writer{
		Addr:         kafka.TCP(cfg.Brokers...),
		Transport:    transport,
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: 2 * time.Millisecond,
		BatchSize:    1000,
		// BatchBytes stays at kafka-go's default (1 MiB), the brokers' default
		// message.max.bytes: a larger record batch is refused as "Message Size Too Large".
		MaxAttempts: 5,
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
		if errors.Is(err, kafka.InvalidReplicationFactor) {
			return fmt.Errorf("create topics: --kafka-replication-factor %d: more than the cluster's brokers: %w", b.cfg.ReplicationFactor, err)
		}
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
			if k == bus.HeaderCluster || k == bus.HeaderMsgID {
				continue // set above from the message
			}
			h = append(h, kafka.Header{Key: k, Value: []byte(v)})
		}
		// The key partitions by cluster; HeaderCluster keeps the name as it is.
		km[i] = kafka.Message{Topic: Topic(m.Stream), Key: []byte(bus.ClusterToken(m.Cluster)), Value: m.Data, Headers: h}
	}
	if err := b.w.WriteMessages(ctx, km...); err != nil {
		if tooLarge(err) {
			return fmt.Errorf("publish to kafka: %w: %w", bus.ErrTooLarge, err)
		}
		return fmt.Errorf("publish to kafka: %w: %w", bus.ErrUnavailable, err)
	}
	return nil
}

// tooLarge reports whether err (possibly kafka.WriteErrors, one per message) refuses a
// message for its size, client-side (kafka-go's batch limit) or by the broker.
func tooLarge(err error) bool {
	var we kafka.WriteErrors
	if errors.As(err, &we) {
		for _, e := range we {
			if e != nil && tooLarge(e) {
				return true
			}
		}
		return false
	}
	var mt kafka.MessageTooLargeError
	return errors.As(err, &mt) || errors.Is(err, kafka.MessageSizeTooLarge)
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
	b.closeOnce.Do(func() {
		err = b.w.Close()
		b.transport.CloseIdleConnections()
	})
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
// every message has been settled. Kafka has no publish-side de-duplication, so a message whose
// ID this consumer already received within its window (the last 2^17 ids) is settled without
// being handed out again; this is safe because offsets are only committed up to settled
// messages, so after a restart the window starts empty and nothing unsettled is skipped.
// On cancellation it waits (up to DrainTimeout) for deliveries in flight to be settled, then leaves.
func (c *consumer) Consume(ctx context.Context, h bus.Handler) error {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:  c.b.cfg.Brokers,
		GroupID:  c.group,
		Topic:    Topic(c.stream),
		MinBytes: 1,
		MaxBytes: 16 << 20,
		// kafka-go also reads the fetch response within MaxWait: under load (a 2-core machine
		// at a load of 20, -race) a broker took more than 250 ms to answer a fetch of a few
		// MiB, every fetch timed out and nothing was ever delivered. The broker answers as soon
		// as MinBytes are there, so a longer MaxWait costs an idle poll's latency only.
		MaxWait:           5 * time.Second,
		StartOffset:       kafka.FirstOffset,
		HeartbeatInterval: time.Second,
		SessionTimeout:    10 * time.Second,
		RebalanceTimeout:  10 * time.Second,
		CommitInterval:    0,
	})
	defer r.Close()
	// Kafka has no redelivery count of its own: Delivered counts this consumer's Naks of a
	// message, and the bound is the same as on NATS.
	h = bus.BoundDeliveries(c.b, c.stream, c.opts, h)
	tr := newTracker()
	seen := newWindow(1 << 17)
	sem := make(chan struct{}, c.opts.MaxUnacked)
	commitErr := make(chan error, 1)
	drain := func() {
		deadline := time.After(c.opts.DrainTimeout)
		for i := 0; i < cap(sem); i++ {
			select {
			case sem <- struct{}{}:
			case <-deadline:
				c.b.cfg.Logger.Warn("kafka consumer left with unsettled deliveries; they will be redelivered", "topic", Topic(c.stream))
				return
			}
		}
	}
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			drain()
			return nil
		case err := <-commitErr:
			return err
		}
		m, err := r.FetchMessage(ctx)
		if err != nil {
			<-sem
			if ctx.Err() != nil {
				drain()
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
		a := &acker{settle: func() error {
			defer func() { <-sem }()
			upTo, ok := tr.done(m.Partition, m.Offset)
			if !ok {
				return nil
			}
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := r.CommitMessages(cctx, kafka.Message{Topic: m.Topic, Partition: m.Partition, Offset: upTo})
			if err != nil {
				err = fmt.Errorf("commit %s/%d@%d: %w", m.Topic, m.Partition, upTo, err)
				select {
				case commitErr <- err:
				default:
				}
			}
			return err
		}}
		a.abandoned = func() { <-sem }
		d.Acker = a
		a.redeliver = func(delay time.Duration) {
			time.AfterFunc(delay, func() {
				if ctx.Err() == nil {
					d.Delivered++
					h(ctx, d)
				} else {
					a.abandon()
				}
			})
		}
		if d.ID != "" && !seen.add(d.ID) {
			_ = a.Ack(ctx)
			continue
		}
		h(ctx, d)
	}
}

type acker struct {
	once      sync.Once
	settle    func() error
	redeliver func(time.Duration)
	abandoned func()
}

// Ack settles the delivery and commits what is now contiguous in its partition.
func (a *acker) Ack(context.Context) error {
	var err error
	a.once.Do(func() { err = a.settle() })
	return err
}

// abandon gives up the delivery's slot without committing; it is redelivered after a restart.
func (a *acker) abandon() { a.once.Do(a.abandoned) }

// Nak redelivers the message to this consumer after delay; Kafka offsets cannot move past an
// unsettled message, so nothing later in its partition is committed meanwhile.
func (a *acker) Nak(delay time.Duration) error {
	a.redeliver(max(delay, 100*time.Millisecond))
	return nil
}

// Term settles a poison message so the partition can move on.
func (a *acker) Term(string) error { return a.Ack(context.Background()) }

// window remembers the last n ids.
type window struct {
	mu   sync.Mutex
	ids  map[string]struct{}
	ring []string
	next int
}

func newWindow(n int) *window {
	return &window{ids: make(map[string]struct{}, n), ring: make([]string, n)}
}

// add records id and reports whether it was new.
func (w *window) add(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.ids[id]; ok {
		return false
	}
	if old := w.ring[w.next]; old != "" {
		delete(w.ids, old)
	}
	w.ring[w.next] = id
	w.next = (w.next + 1) % len(w.ring)
	w.ids[id] = struct{}{}
	return true
}

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

// Backlog implements bus.BacklogReader: the group's lag on the stream's topic, summed over
// its partitions (the end of each partition minus the group's committed offset there; a
// partition the group never committed counts from its first offset, where a new group starts).
func (b *Bus) Backlog(ctx context.Context, s bus.Stream, group string) (int64, error) {
	topic := Topic(s)
	fail := func(err error) (int64, error) {
		return 0, fmt.Errorf("read the lag of %s on %s: %w", group, topic, err)
	}
	c := &kafka.Client{Addr: kafka.TCP(b.cfg.Brokers...), Transport: b.transport, Timeout: 10 * time.Second}
	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return fail(err)
	}
	var parts []int
	var ends []kafka.OffsetRequest
	for _, t := range md.Topics {
		if t.Error != nil {
			return fail(t.Error)
		}
		for _, p := range t.Partitions {
			parts = append(parts, p.ID)
			ends = append(ends, kafka.FirstOffsetOf(p.ID), kafka.LastOffsetOf(p.ID))
		}
	}
	if len(parts) == 0 {
		return 0, nil
	}
	offs, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: ends}})
	if err != nil {
		return fail(err)
	}
	committed, err := c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	if err == nil {
		err = committed.Error
	}
	next := map[int]int64{}
	switch {
	case errors.Is(err, kafka.GroupIdNotFound):
		// A group that never committed (Kafka answers -1 offsets, some brokers this error).
		committed = &kafka.OffsetFetchResponse{}
	case err != nil:
		return fail(err)
	}
	for _, p := range committed.Topics[topic] {
		if p.Error != nil {
			return fail(p.Error)
		}
		next[p.Partition] = p.CommittedOffset // the next offset to read; -1: none committed
	}
	var lag int64
	for _, p := range offs.Topics[topic] {
		if p.Error != nil {
			return fail(p.Error)
		}
		from, ok := next[p.Partition]
		if !ok || from < p.FirstOffset {
			from = p.FirstOffset
		}
		lag += max(p.LastOffset-from, 0)
	}
	return lag, nil
}
