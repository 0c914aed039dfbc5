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
	"os"
	"strings"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl/plain"

	"github.com/auditlens/auditlens/lib/backoff"
	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/envelope"
	"github.com/auditlens/auditlens/lib/reason"
	"github.com/auditlens/auditlens/services/ingest/input"
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

// Source reads one topic.
type Source struct {
	cfg    Config
	conn   resolved
	env    *input.Env
	em     *input.Emitter
	reader *kafkago.Reader
	dec    *envelope.Decoder
	header map[string]string
}

// FetchMaxBytes bounds the record values one poll gathers (and what one fetch of a
// partition returns).
const FetchMaxBytes = 64 << 20

// queueCapacity is how many records the reader fetches ahead of the poll.
const queueCapacity = 32

// pollMax bounds the records one poll gathers; pollLinger is how long it waits for another
// record once it has one.
const (
	pollMax    = 4096
	pollLinger = 20 * time.Millisecond
)

// sessionTimeout is how long the group waits for a silent member (killed, partitioned away)
// before its partitions, and what it had fetched but not committed, go to another member:
// the Kafka source's recovery time after a crash. Event Hubs accepts 6s to 300s.
const sessionTimeout = 10 * time.Second

// New creates the Kafka reader (it connects on first use).
func New(cfg Config, env *input.Env) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	conn, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	dialer := &kafkago.Dialer{Timeout: 10 * time.Second, DualStack: true}
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
		dialer.TLS = tc
	}
	if conn.user != "" {
		dialer.SASLMechanism = plain.Mechanism{Username: conn.user, Password: conn.pass}
	}
	em := env.Emitter(Input)
	log := em.Logger()
	reader := kafkago.NewReader(kafkago.ReaderConfig{
		Brokers: conn.brokers, GroupID: cfg.Group, Topic: conn.topic, Dialer: dialer,
		MinBytes: 1, MaxBytes: FetchMaxBytes,
		// Records fetched ahead of the poll wait in a queue of this many (an Event Hubs
		// message is at most 1 MB): what the source holds is about a poll plus this.
		QueueCapacity: queueCapacity,
		// The broker answers a fetch as soon as MinBytes are there: a long MaxWait costs an
		// idle poll's latency only, and a loaded machine is not mistaken for a dead broker.
		MaxWait:     5 * time.Second,
		StartOffset: kafkago.FirstOffset,
		// Offsets are committed by the source, after the bus stored the records' events.
		CommitInterval:    0,
		HeartbeatInterval: time.Second,
		// Recovery time after a crash: the records a dead ingest held (fetched, not yet
		// committed) go to another member once its session times out.
		SessionTimeout:   sessionTimeout,
		RebalanceTimeout: sessionTimeout,
		ErrorLogger: kafkago.LoggerFunc(func(msg string, args ...any) {
			log.Warn("the Kafka source: "+fmt.Sprintf(msg, args...), "source", conn.description)
		}),
	})
	return &Source{cfg: cfg, conn: conn, env: env, em: em, reader: reader, dec: envelope.NewDecoder(0), header: env.Header(Input)}, nil
}

// Ready reports an error while publishing fails (retried, or answered with a retryable
// error), or the bus is not ready.
func (s *Source) Ready() error { return s.em.Ready() }

// Run polls until ctx is cancelled. Each poll's records are published, retried while the
// bus fails, and only then committed; what is not committed is read again after a restart
// (the message ids make that store nothing twice).
func (s *Source) Run(ctx context.Context) error {
	defer s.reader.Close()
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	fails := 0
	for {
		recs, err := s.poll(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			fails++
			s.em.Logger().Warn("fetch from the Kafka source", "source", s.conn.description, "err", err)
			if retry.Wait(ctx, fails) != nil {
				return nil
			}
			continue
		}
		fails = 0
		if err := s.store(ctx, recs); err != nil {
			return nil // ctx cancelled while the bus was failing: nothing committed
		}
		if err := s.reader.CommitMessages(ctx, recs...); err != nil && ctx.Err() == nil {
			s.em.Logger().Warn("commit offsets to the Kafka source (the records will be read again)", "err", err)
		}
	}
}

// poll waits for a record, then gathers the ones that follow it within pollLinger each, up
// to pollMax records or FetchMaxBytes of values.
func (s *Source) poll(ctx context.Context) ([]kafkago.Message, error) {
	m, err := s.reader.FetchMessage(ctx)
	if err != nil {
		return nil, err
	}
	recs := []kafkago.Message{m}
	size := len(m.Value)
	for len(recs) < pollMax && size < FetchMaxBytes {
		m, ok := s.next(ctx)
		if !ok {
			break // none within pollLinger, or ctx ended: publish what there is
		}
		recs = append(recs, m)
		size += len(m.Value)
	}
	return recs, nil
}

// next is the next record if one comes within pollLinger.
func (s *Source) next(ctx context.Context) (kafkago.Message, bool) {
	lctx, cancel := context.WithTimeout(ctx, pollLinger)
	defer cancel()
	m, err := s.reader.FetchMessage(lctx)
	return m, err == nil
}

// store publishes the events of recs, retrying with back-off until the bus took them or ctx
// is cancelled; what the records decode to is bounded by the managed sources' budget (a poll
// of up to 64 MiB of compressed envelopes is published in runs that fit it).
func (s *Source) store(ctx context.Context, recs []kafkago.Message) error {
	lim := s.env.Limit()
	s.dec.SetLimit(lim)
	defer s.dec.SetLimit(nil)
	return s.em.PublishRecords(ctx, "the Kafka offsets", "kafka-source", true, lim, len(recs),
		func(i int) input.Converted { return s.messages(&recs[i]) })
}

// messages turns one record into event messages (named cluster/auditID/stage) or dead
// letters (named by topic, partition and offset).
func (s *Source) messages(r *kafkago.Message) (c input.Converted) {
	src := fmt.Sprintf("kafka:%s/%d/%d", r.Topic, r.Partition, r.Offset)
	dead := func(data []byte, err error) {
		label := reason.Of(err)
		c.AddBad(label, 1)
		s.em.Logger().Warn("bad Kafka record sent to the dead-letter stream", "source", src, "reason", label, "err", bus.Short(err.Error(), 512))
		c.Msgs = append(c.Msgs, s.env.DeadLetter(s.env.Cluster, Input, fmt.Sprintf("%s/%d/%d/%d", r.Topic, r.Partition, r.Offset, len(c.Msgs)), src, err, data))
	}
	items, st, err := s.dec.SplitAny(r.Value, s.env.MaxEventSize)
	if errors.Is(err, envelope.ErrBusy) {
		return input.Converted{Err: err}
	}
	if err != nil {
		dead(r.Value, err)
		return c
	}
	if st.Skipped > 0 {
		s.em.Logger().Debug("records without audit events skipped", "source", src, "records", st.Skipped, "reasons", st.Reasons)
	}
	for _, it := range items {
		if it.Err != nil {
			dead(it.Raw, it.Err)
			continue
		}
		cluster := it.Origin.ClusterOr(s.env.Cluster)
		c.Events++
		c.Msgs = append(c.Msgs, bus.Message{Stream: bus.Events, Cluster: cluster, ID: bus.EventID(cluster, it.Key()), Header: s.header, Data: it.Raw})
	}
	return c
}
