// Package natsbus implements bus.Bus on NATS JetStream, against a remote cluster or an
// embedded in-process nats-server with a file store.
package natsbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/auditlens/auditlens/lib/bus"
)

// Embedded is the URL value that starts an in-process server.
const Embedded = "embedded"

// Config configures the connection and the streams.
type Config struct {
	// URL is a NATS URL list ("nats://a:4222,nats://b:4222") or Embedded.
	URL string
	// StoreDir is the JetStream file store of the embedded server.
	StoreDir string
	// EmbeddedListen, when set, makes the embedded server also listen on this host:port so
	// other processes can connect; otherwise it is reachable in-process only.
	EmbeddedListen string

	// Authentication and TLS for a remote server; all optional.
	User, Password, Token string
	CredsFile, NKeyFile   string
	TLSCAFile             string
	TLSCertFile           string
	TLSKeyFile            string

	// Name is the client connection name shown by the server.
	Name string
	// Duplicates is the de-duplication window of the streams (default 2m).
	Duplicates time.Duration
	// MaxAge bounds how long messages are kept (default 7 days).
	MaxAge time.Duration
	// Replicas of each stream in a clustered deployment (default 1).
	Replicas int
	// MaxInflight bounds asynchronous publishes awaiting an acknowledgement (default 4096).
	MaxInflight int
	// StallWait is how long Publish waits for room when MaxInflight is reached (default 10s).
	StallWait time.Duration
	// AckTimeout bounds the wait for one publish acknowledgement (default 30s).
	AckTimeout time.Duration
	// OneAtATime publishes every message on its own even where the server offers batched
	// publishing (nats-server >= 2.14), as auditlens does with older servers.
	OneAtATime bool

	Logger *slog.Logger
}

func (c *Config) withDefaults() Config {
	o := *c
	if o.Duplicates <= 0 {
		o.Duplicates = 2 * time.Minute
	}
	if o.MaxAge <= 0 {
		o.MaxAge = 7 * 24 * time.Hour
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.MaxInflight <= 0 {
		o.MaxInflight = 4096
	}
	if o.StallWait <= 0 {
		o.StallWait = 10 * time.Second
	}
	if o.AckTimeout <= 0 {
		o.AckTimeout = 30 * time.Second
	}
	if o.Name == "" {
		o.Name = "auditlens"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Validate reports the first configuration error, naming the flag at fault.
func (c *Config) Validate() error {
	if c.URL == "" {
		return errors.New("--nats-url is empty: give a NATS URL or \"embedded\"")
	}
	if c.URL == Embedded && c.StoreDir == "" {
		return errors.New("--nats-url embedded needs --nats-store-dir")
	}
	if c.URL != Embedded {
		for _, u := range strings.Split(c.URL, ",") {
			u = strings.TrimSpace(u)
			if !strings.Contains(u, "://") && strings.Contains(u, "/") {
				return fmt.Errorf("--nats-url %q is not a NATS URL (nats://host:4222)", u)
			}
		}
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return errors.New("--nats-tls-cert and --nats-tls-key go together")
	}
	return nil
}

// StreamName is the JetStream stream of s: AUDIT_EVENTS, AUDIT_FINDINGS, AUDIT_DEADLETTER.
func StreamName(s bus.Stream) string { return "AUDIT_" + strings.ToUpper(string(s)) }

// Subject is where messages of stream s for cluster are published.
func Subject(s bus.Stream, cluster string) string { return "auditlens." + string(s) + "." + cluster }

// Bus is a bus.Bus on JetStream.
type Bus struct {
	cfg Config
	srv *server.Server // embedded server, nil for a remote one
	nc  *nats.Conn
	js  jetstream.JetStream

	// batches publishes to the streams in batched (fast-batch publishing on); the others
	// get one asynchronous publish per message (servers before 2.14).
	batches *batcher
	batched map[bus.Stream]bool

	closeOnce sync.Once
}

var _ bus.Bus = (*Bus)(nil)

// Open connects (starting the embedded server when asked) and creates or updates the streams.
func Open(ctx context.Context, cfg Config) (*Bus, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	b := &Bus{cfg: c}
	opts := []nats.Option{
		nats.Name(c.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectBufSize(64 << 20),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: our own Close
				c.Logger.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			c.Logger.Info("nats reconnected", "url", nc.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			c.Logger.Warn("nats async error", "err", err)
		}),
	}
	url := c.URL
	if c.URL == Embedded {
		srv, err := StartServer(c.StoreDir, c.EmbeddedListen)
		if err != nil {
			return nil, err
		}
		b.srv = srv
		if c.EmbeddedListen == "" {
			opts = append(opts, nats.InProcessServer(srv))
		}
		url = srv.ClientURL()
	} else {
		auth, err := c.authOptions()
		if err != nil {
			return nil, err
		}
		opts = append(opts, auth...)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		b.shutdownServer()
		return nil, fmt.Errorf("connect to nats %s: %w: %w", redact(url), bus.ErrUnavailable, err)
	}
	b.nc = nc
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(c.MaxInflight))
	if err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	b.js = js
	if b.batches, err = newBatcher(nc, c.MaxInflight, c.AckTimeout); err != nil {
		_ = b.Close()
		return nil, err
	}
	if err := b.ensureStreams(ctx); err != nil {
		_ = b.Close()
		return nil, err
	}
	return b, nil
}

func (c *Config) authOptions() ([]nats.Option, error) {
	var o []nats.Option
	if c.User != "" {
		o = append(o, nats.UserInfo(c.User, c.Password))
	}
	if c.Token != "" {
		o = append(o, nats.Token(c.Token))
	}
	if c.CredsFile != "" {
		o = append(o, nats.UserCredentials(c.CredsFile))
	}
	if c.NKeyFile != "" {
		opt, err := nats.NkeyOptionFromSeed(c.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--nats-nkey-file %s: %w", c.NKeyFile, err)
		}
		o = append(o, opt)
	}
	if c.TLSCAFile != "" {
		o = append(o, nats.RootCAs(c.TLSCAFile))
	}
	if c.TLSCertFile != "" {
		o = append(o, nats.ClientCert(c.TLSCertFile, c.TLSKeyFile))
	}
	return o, nil
}

// StartServer starts an in-process nats-server with JetStream on a file store in dir. With
// listen empty it accepts in-process connections only.
func StartServer(dir, listen string) (*server.Server, error) {
	opts := &server.Options{
		ServerName: "auditlens-embedded",
		JetStream:  true,
		StoreDir:   dir,
		NoSigs:     true,
		NoLog:      true,
		// One process, one client: generous payloads for huge audit events.
		MaxPayload: 8 << 20,
	}
	if listen == "" {
		opts.DontListen = true
	} else {
		host, port, err := splitHostPort(listen)
		if err != nil {
			return nil, fmt.Errorf("--nats-embedded-listen %q: %w", listen, err)
		}
		opts.Host, opts.Port = host, port
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("start embedded nats: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("start embedded nats in %s: not ready after 10s (is the store locked by another process?)", dir)
	}
	return srv, nil
}

func (b *Bus) ensureStreams(ctx context.Context) error {
	b.batched = map[bus.Stream]bool{}
	for _, s := range bus.Streams {
		sc := jetstream.StreamConfig{
			Name:       StreamName(s),
			Subjects:   []string{"auditlens." + string(s) + ".>"},
			Storage:    jetstream.FileStorage,
			Retention:  jetstream.LimitsPolicy,
			Duplicates: b.cfg.Duplicates,
			MaxAge:     b.cfg.MaxAge,
			Replicas:   b.cfg.Replicas,
			Discard:    jetstream.DiscardOld,
			// Fast-batch publishing (nats-server >= 2.14); older servers ignore or refuse it.
			AllowBatchPublish: true,
		}
		st, err := b.createOrUpdateStream(ctx, sc)
		if err != nil {
			sc.AllowBatchPublish = false
			if st, err = b.createOrUpdateStream(ctx, sc); err != nil {
				return fmt.Errorf("create or update stream %s: %w", sc.Name, err)
			}
		}
		b.batched[s] = st.CachedInfo().Config.AllowBatchPublish && !b.cfg.OneAtATime
		if !st.CachedInfo().Config.AllowBatchPublish {
			b.cfg.Logger.Info("the nats server does not offer batched publishing; publishing one message at a time", "stream", sc.Name)
		}
	}
	return nil
}

func (b *Bus) createOrUpdateStream(ctx context.Context, sc jetstream.StreamConfig) (jetstream.Stream, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return b.js.CreateOrUpdateStream(cctx, sc)
}

// ClientURL returns the URL other processes can use to reach the embedded server, or "".
func (b *Bus) ClientURL() string {
	if b.srv == nil || b.cfg.EmbeddedListen == "" {
		return ""
	}
	return b.srv.ClientURL()
}

// Publish implements bus.Publisher: the messages of each stream go as one batch (or, on an
// older server, as asynchronous publishes awaited together).
func (b *Bus) Publish(ctx context.Context, msgs ...bus.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	limit := b.nc.MaxPayload()
	same := true
	for i := range msgs {
		m := &msgs[i]
		if err := m.Validate(); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		// Refuse oversized messages before sending anything: a batch cut short by the
		// client would wait on the server until it times out.
		if size := int64(len(m.Data) + headerSize(m)); limit > 0 && size > limit {
			return fmt.Errorf("publish %s (%d bytes) to %s: %w: %w", bus.Short(m.ID, 100), len(m.Data), Subject(m.Stream, m.Cluster), bus.ErrTooLarge, nats.ErrMaxPayload)
		}
		same = same && m.Stream == msgs[0].Stream
	}
	if same {
		return b.publish(ctx, msgs)
	}
	for _, s := range bus.Streams {
		var part []bus.Message
		for i := range msgs {
			if msgs[i].Stream == s {
				part = append(part, msgs[i])
			}
		}
		if len(part) > 0 {
			if err := b.publish(ctx, part); err != nil {
				return err
			}
		}
	}
	return nil
}

// headerSize is an upper bound of the encoded headers of m.
func headerSize(m *bus.Message) int {
	n := len("NATS/1.0\r\n\r\n") + len("Nats-Msg-Id: \r\n") + len(m.ID)
	for k, v := range m.Header {
		n += len(k) + len(v) + 4
	}
	return n
}

// publish stores msgs, all of one stream.
func (b *Bus) publish(ctx context.Context, msgs []bus.Message) error {
	if b.batched[msgs[0].Stream] {
		return b.batches.publish(ctx, msgs)
	}
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		nm := nats.NewMsg(Subject(m.Stream, m.Cluster))
		nm.Data = m.Data
		for k, v := range m.Header {
			nm.Header.Set(k, v)
		}
		f, err := b.js.PublishMsgAsync(nm, jetstream.WithMsgID(m.ID), jetstream.WithStallWait(b.cfg.StallWait))
		if errors.Is(err, nats.ErrMaxPayload) {
			return fmt.Errorf("publish %s (%d bytes) to %s: %w: %w", bus.Short(m.ID, 100), len(m.Data), nm.Subject, bus.ErrTooLarge, err)
		}
		if err != nil {
			return fmt.Errorf("publish to %s: %w: %w", nm.Subject, bus.ErrUnavailable, err)
		}
		futures = append(futures, f)
	}
	timer := time.NewTimer(b.cfg.AckTimeout)
	defer timer.Stop()
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("publish to %s: %w: %w", f.Msg().Subject, bus.ErrUnavailable, err)
		case <-timer.C:
			return fmt.Errorf("publish: no acknowledgement within %s: %w", b.cfg.AckTimeout, bus.ErrUnavailable)
		case <-ctx.Done():
			return fmt.Errorf("publish: %w", ctx.Err())
		}
	}
	return nil
}

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
			return nil
		}
		return fmt.Errorf("create consumer %s on %s: %w", c.cfg.Durable, StreamName(c.stream), err)
	}
	log := c.b.cfg.Logger
	batch := min(c.cfg.MaxAckPending, 1000)
	h = bus.BoundDeliveries(c.b, c.stream, c.opts, h)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		d := &bus.Delivery{Acker: natsAcker{m}}
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
	}, jetstream.PullMaxMessagesWithBytesLimit(batch, c.pullBytes()), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		log.Debug("nats consume", "consumer", c.cfg.Durable, "err", err)
	}))
	if err != nil {
		return fmt.Errorf("consume %s: %w", c.cfg.Durable, err)
	}
	select {
	case <-ctx.Done():
		cc.Stop()
		<-cc.Closed()
		return nil
	case <-cc.Closed():
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("consumer %s closed: %w", c.cfg.Durable, bus.ErrUnavailable)
	}
}

// pullBytes bounds the bytes of deliveries buffered for the consumer: far below what the
// server buffers for one client (64 MiB, past which it drops the connection as a slow
// consumer), and never below two of the largest messages the server accepts.
func (c *consumer) pullBytes() int {
	return max(16<<20, 2*int(c.b.nc.MaxPayload()))
}

type natsAcker struct{ m jetstream.Msg }

func (a natsAcker) Ack(ctx context.Context) error {
	// A plain Ack is fire-and-forget; redelivery after a lost ack is harmless downstream
	// (idempotent writes) and DoubleAck would cost a round trip per message.
	return a.m.Ack()
}
func (a natsAcker) Nak(delay time.Duration) error {
	if delay <= 0 {
		return a.m.Nak()
	}
	return a.m.NakWithDelay(delay)
}
func (a natsAcker) Term(reason string) error { return a.m.TermWithReason(reason) }

// Ready implements bus.Bus.
func (b *Bus) Ready() error {
	if b.nc == nil || !b.nc.IsConnected() {
		return fmt.Errorf("nats not connected: %w", bus.ErrUnavailable)
	}
	return nil
}

// Close implements bus.Bus: flushes, closes the connection, stops the embedded server.
func (b *Bus) Close() error {
	b.closeOnce.Do(func() {
		if b.batches != nil {
			b.batches.close()
		}
		if b.nc != nil {
			_ = b.nc.FlushTimeout(5 * time.Second)
			b.nc.Close()
		}
		b.shutdownServer()
	})
	return nil
}

func (b *Bus) shutdownServer() {
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv.WaitForShutdown()
	}
}

func redact(url string) string {
	if i := strings.Index(url, "@"); i >= 0 {
		if j := strings.Index(url, "://"); j >= 0 && j < i {
			return url[:j+3] + "***" + url[i:]
		}
	}
	return url
}

func splitHostPort(hp string) (string, int, error) {
	i := strings.LastIndex(hp, ":")
	if i < 0 {
		return "", 0, errors.New("want host:port")
	}
	var port int
	if _, err := fmt.Sscanf(hp[i+1:], "%d", &port); err != nil || port < 0 || port > 65535 {
		return "", 0, errors.New("bad port")
	}
	host := hp[:i]
	if host == "" {
		host = "0.0.0.0"
	}
	return host, port, nil
}
