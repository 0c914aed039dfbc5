// Package natsbus implements bus.Bus on NATS JetStream, against a remote cluster or an
// embedded in-process nats-server with a file store.
package natsbus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/secret"
)

// StreamName is the JetStream stream of s: AUDIT_EVENTS, AUDIT_FINDINGS, AUDIT_DEADLETTER.
func StreamName(s bus.Stream) string { return "AUDIT_" + strings.ToUpper(string(s)) }

// Subject is where messages of stream s for cluster are published: its last token is
// bus.ClusterToken(cluster). A message whose token is not its cluster name carries the name
// in bus.HeaderCluster, which consumers read instead of the token.
func Subject(s bus.Stream, cluster string) string {
	return "auditlens." + string(s) + "." + bus.ClusterToken(cluster)
}

// clusterHeader is the bus.HeaderCluster a message of cluster needs, "" when the subject
// token is the name.
func clusterHeader(cluster string) string {
	if bus.ClusterToken(cluster) == cluster {
		return ""
	}
	return cluster
}

// Bus is a bus.Bus on JetStream.
type Bus struct {
	cfg Config
	srv *server.Server // embedded server, nil for a remote one
	nc  *nats.Conn
	js  jetstream.JetStream

	// batches publishes to the streams in batched (fast-batch publishing on); the others
	// get one asynchronous publish per message (servers before 2.14).
	batches *batcher
	batched map[bus.Stream]*atomic.Bool

	closeOnce sync.Once
}

var (
	_ bus.Bus           = (*Bus)(nil)
	_ bus.BacklogReader = (*Bus)(nil)
)

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
		return nil, fmt.Errorf("connect to nats %s: %w: %w", secret.URLs(url), bus.ErrUnavailable, err)
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

func (b *Bus) ensureStreams(ctx context.Context) error {
	b.batched = map[bus.Stream]*atomic.Bool{}
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
		before := b.streamReplicas(ctx, sc.Name)
		st, err := b.createOrUpdateStream(ctx, sc)
		for attempt := 1; err != nil && attempt < 3 && ctx.Err() == nil; attempt++ {
			// A cluster that is still electing its leaders refuses for a moment: ask again
			// before concluding that the server does not offer batched publishing (turning it
			// off on the stream would turn it off for every other process too).
			time.Sleep(time.Duration(attempt) * time.Second)
			st, err = b.createOrUpdateStream(ctx, sc)
		}
		if err != nil {
			sc.AllowBatchPublish = false
			if st, err = b.createOrUpdateStream(ctx, sc); err != nil {
				return b.replicasError(fmt.Errorf("create or update stream %s: %w", sc.Name, err))
			}
		}
		if after := st.CachedInfo().Config.Replicas; before != 0 && before != after {
			b.cfg.Logger.Info("nats stream scaled", "stream", sc.Name, "replicas_before", before, "replicas", after)
		}
		b.batched[s] = new(atomic.Bool)
		b.batched[s].Store(st.CachedInfo().Config.AllowBatchPublish && !b.cfg.OneAtATime)
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
	if c := clusterHeader(m.Cluster); c != "" {
		n += len(bus.HeaderCluster) + len(c) + 4
	}
	for k, v := range m.Header {
		n += len(k) + len(v) + 4
	}
	return n
}

// publish stores msgs, all of one stream.
func (b *Bus) publish(ctx context.Context, msgs []bus.Message) error {
	if on := b.batched[msgs[0].Stream]; on != nil && on.Load() {
		err := b.batches.publish(ctx, msgs)
		if !errors.Is(err, errBatchDisabled) {
			return err
		}
		// Another process (an older build, or one that met an older server) turned batched
		// publishing off on the stream: publish one at a time from now on. What the batch
		// stored is stored once again by id.
		if on.CompareAndSwap(true, false) {
			b.cfg.Logger.Warn("batched publishing was turned off on the stream; publishing one message at a time", "stream", StreamName(msgs[0].Stream))
		}
	}
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		nm := nats.NewMsg(Subject(m.Stream, m.Cluster))
		nm.Data = m.Data
		for k, v := range m.Header {
			nm.Header.Set(k, v)
		}
		if c := clusterHeader(m.Cluster); c != "" {
			nm.Header.Set(bus.HeaderCluster, c)
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
