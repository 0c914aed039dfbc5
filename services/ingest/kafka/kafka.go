// Package kafka is ingest's Kafka source: it reads a topic that holds audit events or cloud
// envelopes (Azure Event Hubs' Kafka endpoint, fed by an AKS diagnostic setting, or any log
// shipper) and commits a record's offset only after the bus has stored its events.
package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/lib/envelope"
	"github.com/auditlens/auditlens/lib/reason"
	"github.com/auditlens/auditlens/services/ingest/metrics"
)

// Input is the metrics label of this input.
const Input = "kafka"

// Config configures the source.
type Config struct {
	Brokers          string // comma-separated host:port
	Topic            string
	Group            string
	TLS              bool
	TLSCA            string
	SASLUser         string
	SASLPasswordFile string
	// EventHubsConnectionStringFile holds an Event Hubs connection string: it sets the
	// brokers (<namespace>.servicebus.windows.net:9093), TLS, SASL PLAIN with the user
	// $ConnectionString, and the topic when the string has EntityPath.
	EventHubsConnectionStringFile string
}

// DefaultConfig is the source's defaults; off until Brokers or
// EventHubsConnectionStringFile is set.
func DefaultConfig() Config { return Config{Group: "auditlens-ingest"} }

// RegisterFlags adds the --kafka-source-* flags to fs, each defaulting to the current value of
// its field.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Brokers, "kafka-source-brokers", c.Brokers, "read audit events or cloud envelopes from Kafka at these comma-separated `host:port`s (empty: off unless --eventhubs-connection-string-file)")
	fs.StringVar(&c.Topic, "kafka-source-topic", c.Topic, "Kafka `topic` to read (Event Hubs: the event hub's name)")
	fs.StringVar(&c.Group, "kafka-source-group", c.Group, "Kafka consumer `group` whose committed offsets say what is stored")
	fs.BoolVar(&c.TLS, "kafka-source-tls", c.TLS, "connect to the Kafka source over TLS")
	fs.StringVar(&c.TLSCA, "kafka-source-tls-ca", c.TLSCA, "CA `file` that signs the Kafka source's certificates (default: the system's)")
	fs.StringVar(&c.SASLUser, "kafka-source-sasl-user", c.SASLUser, "SASL PLAIN `user` of the Kafka source")
	fs.StringVar(&c.SASLPasswordFile, "kafka-source-sasl-password-file", c.SASLPasswordFile, "`file` holding the SASL PLAIN password of the Kafka source")
	fs.StringVar(&c.EventHubsConnectionStringFile, "eventhubs-connection-string-file", c.EventHubsConnectionStringFile, "`file` holding an Azure Event Hubs connection string (Endpoint=sb://NS.servicebus.windows.net/;SharedAccessKeyName=...;SharedAccessKey=...[;EntityPath=HUB]): read AKS audit logs from its Kafka endpoint with TLS and SASL PLAIN")
}

// On reports whether the source is configured.
func (c Config) On() bool { return c.Brokers != "" || c.EventHubsConnectionStringFile != "" }

// Validate checks the flags when the source is on.
func (c Config) Validate() error {
	if !c.On() {
		return nil
	}
	for name, f := range map[string]string{"--kafka-source-tls-ca": c.TLSCA, "--kafka-source-sasl-password-file": c.SASLPasswordFile, "--eventhubs-connection-string-file": c.EventHubsConnectionStringFile} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%s %s: %w", name, f, err)
		}
	}
	if c.EventHubsConnectionStringFile == "" {
		if c.Topic == "" {
			return errors.New("--kafka-source-brokers needs --kafka-source-topic")
		}
		if (c.SASLUser == "") != (c.SASLPasswordFile == "") {
			return errors.New("--kafka-source-sasl-user and --kafka-source-sasl-password-file go together")
		}
	}
	if c.Group == "" {
		return errors.New("--kafka-source-group is empty: a consumer group keeps what is stored")
	}
	return nil
}

// resolved is the connection after the Event Hubs connection string is read.
type resolved struct {
	brokers     []string
	topic       string
	tls         bool
	user, pass  string
	description string
}

func (c *Config) resolve() (resolved, error) {
	r := resolved{brokers: split(c.Brokers), topic: c.Topic, tls: c.TLS, user: c.SASLUser}
	if c.SASLPasswordFile != "" {
		b, err := os.ReadFile(c.SASLPasswordFile)
		if err != nil {
			return r, fmt.Errorf("read --kafka-source-sasl-password-file: %w", err)
		}
		r.pass = strings.TrimSpace(string(b))
	}
	if c.EventHubsConnectionStringFile != "" {
		b, err := os.ReadFile(c.EventHubsConnectionStringFile)
		if err != nil {
			return r, fmt.Errorf("read --eventhubs-connection-string-file: %w", err)
		}
		cs := strings.TrimSpace(string(b))
		fields := map[string]string{}
		for _, kv := range strings.Split(cs, ";") {
			k, v, _ := strings.Cut(kv, "=")
			fields[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
		ep := fields["endpoint"]
		host := strings.TrimSuffix(strings.TrimPrefix(ep, "sb://"), "/")
		if host == "" || !strings.HasPrefix(ep, "sb://") {
			return r, fmt.Errorf("--eventhubs-connection-string-file %s: no Endpoint=sb://NAMESPACE.servicebus.windows.net/ in it", c.EventHubsConnectionStringFile)
		}
		if len(r.brokers) == 0 {
			if !strings.Contains(host, ":") {
				host += ":9093"
			}
			r.brokers = []string{host}
		}
		if r.topic == "" {
			r.topic = fields["entitypath"]
		}
		if r.topic == "" {
			return r, errors.New("--eventhubs-connection-string-file has no EntityPath: give the event hub as --kafka-source-topic")
		}
		r.tls, r.user, r.pass = true, "$ConnectionString", cs
	}
	r.description = strings.Join(r.brokers, ",") + "/" + r.topic
	return r, nil
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Bus is what the source needs from the bus.
type Bus interface {
	bus.Publisher
	Ready() error
}

// Options are the source's collaborators.
type Options struct {
	// Cluster names events whose envelope names no cluster (the AKS resource id does).
	Cluster      string
	Node         string
	MaxEventSize int
	Logger       *slog.Logger
	Metrics      *metrics.Ingest
	// Batch packs the events of what the source publishes at once into EventBatch messages
	// (lib/bus/eventbatch.Pack); the zero value is eventbatch.DefaultConfig.
	Batch eventbatch.Config
	// Limits bound what a record decodes to (MaxDecoded) and, with Budget, what a poll holds
	// decoded at once; the zero value is envelope.DefaultLimits.
	Limits envelope.Limits
	// Budget is shared with the other managed sources (nil: one of Limits.MaxInflight bytes
	// for this source alone).
	Budget *envelope.Budget
}

// Source reads one topic.
type Source struct {
	cfg    Config
	conn   resolved
	opt    Options
	bus    Bus
	client *kgo.Client
	dec    *envelope.Decoder
	header map[string]string
}

// FetchMaxBytes bounds what one poll fetches.
const FetchMaxBytes = 64 << 20

// sessionTimeout is how long the group waits for a silent member (killed, partitioned away)
// before its partitions, and what it had fetched but not committed, go to another member:
// the Kafka source's recovery time after a crash. Event Hubs accepts 6s to 300s.
const sessionTimeout = 10 * time.Second

// New creates the Kafka client (it connects on first use).
func New(cfg Config, b Bus, opt Options) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
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
	conn, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(conn.brokers...), kgo.ConsumerGroup(cfg.Group), kgo.ConsumeTopics(conn.topic),
		kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxBytes(FetchMaxBytes),
		// Recovery time after a crash: the records a dead ingest held (fetched, not yet
		// committed) go to another member once its session times out (kgo's default, 45s).
		kgo.SessionTimeout(sessionTimeout),
	}
	if conn.tls {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.TLSCA != "" {
			pem, err := os.ReadFile(cfg.TLSCA)
			if err != nil {
				return nil, fmt.Errorf("read --kafka-source-tls-ca: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--kafka-source-tls-ca %s: no PEM certificate in it", cfg.TLSCA)
			}
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if conn.user != "" {
		opts = append(opts, kgo.SASL(plain.Auth{User: conn.user, Pass: conn.pass}.AsMechanism()))
	}
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("create the Kafka source client: %w", err)
	}
	return &Source{cfg: cfg, conn: conn, opt: opt, bus: b, client: client, dec: envelope.NewDecoder(0), header: map[string]string{bus.HeaderNode: opt.Node}}, nil
}

// Ready reports an error while publishing fails (retried, or answered with a retryable
// error), or the bus is not ready.
func (s *Source) Ready() error {
	if err := s.opt.Metrics.Stuck(Input); err != nil {
		return err
	}
	return s.bus.Ready()
}

// Run polls until ctx is cancelled. Each poll's records are published, retried while the
// bus fails, and only then committed; what is not committed is read again after a restart
// (the message ids make that store nothing twice).
func (s *Source) Run(ctx context.Context) error {
	defer func() {
		s.client.AllowRebalance() // leaving the group on Close waits for it
		s.client.Close()
	}()
	for {
		fetches := s.client.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fetches.EachError(func(topic string, p int32, err error) {
			s.opt.Logger.Warn("fetch from the Kafka source", "source", s.conn.description, "partition", p, "err", err)
		})
		var recs []*kgo.Record
		fetches.EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
		if len(recs) > 0 {
			if err := s.store(ctx, recs); err != nil {
				return nil // ctx cancelled while the bus was failing: nothing committed
			}
			if err := s.client.CommitRecords(ctx, recs...); err != nil && ctx.Err() == nil {
				s.opt.Logger.Warn("commit offsets to the Kafka source (the records will be read again)", "err", err)
			}
		}
		s.client.AllowRebalance()
	}
}

// store publishes the events of recs, retrying with back-off until the bus took them or ctx
// is cancelled; what the records decode to is bounded by the managed sources' budget (a poll
// of up to 64 MiB of compressed envelopes is published in runs that fit it).
func (s *Source) store(ctx context.Context, recs []*kgo.Record) error {
	lim := &envelope.Limit{Max: s.opt.Limits.MaxDecoded, Budget: s.opt.Budget}
	s.dec.SetLimit(lim)
	defer s.dec.SetLimit(nil)
	return s.opt.Metrics.PublishRecords(ctx, s.bus, s.opt.Logger, Input, "kafka-source", s.opt.Node, "the Kafka offsets", s.opt.Batch, true, lim, len(recs),
		func(i int) metrics.Converted { return s.messages(recs[i]) })
}

// messages turns one record into event messages (named cluster/auditID/stage) or dead
// letters (named by topic, partition and offset).
func (s *Source) messages(r *kgo.Record) (c metrics.Converted) {
	src := fmt.Sprintf("kafka:%s/%d/%d", r.Topic, r.Partition, r.Offset)
	dead := func(data []byte, err error) {
		c.Bad = reason.Of(err)
		s.opt.Logger.Warn("bad Kafka record sent to the dead-letter stream", "source", src, "reason", c.Bad, "err", bus.Short(err.Error(), 512))
		c.Msgs = append(c.Msgs, bus.NewDeadLetter(s.opt.Cluster, "kafka", fmt.Sprintf("%s/%d/%d/%d", r.Topic, r.Partition, r.Offset, len(c.Msgs)),
			src, err, data, map[string]string{bus.HeaderNode: s.opt.Node}))
	}
	items, st, err := s.dec.SplitAny(r.Value, s.opt.MaxEventSize)
	if errors.Is(err, envelope.ErrBusy) {
		return metrics.Converted{Err: err}
	}
	if err != nil {
		dead(r.Value, err)
		return c
	}
	if st.Skipped > 0 {
		s.opt.Logger.Debug("records without audit events skipped", "source", src, "records", st.Skipped, "reasons", st.Reasons)
	}
	for _, it := range items {
		if it.Err != nil {
			dead(it.Raw, it.Err)
			continue
		}
		cluster := it.Origin.ClusterOr(s.opt.Cluster)
		c.Events++
		c.Msgs = append(c.Msgs, bus.Message{Stream: bus.Events, Cluster: cluster, ID: bus.EventID(cluster, it.Key()), Header: s.header, Data: it.Raw})
	}
	return c
}
