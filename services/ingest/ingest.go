// Package ingest is the ingest service: its inputs (audit log files, the audit webhook, the
// managed clusters' Firehose, Pub/Sub and Kafka sources, the CloudWatch Logs reader) publishing every audit event to the
// bus, built from one Config.
package ingest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/lib/envelope"
	"github.com/auditlens/auditlens/services/ingest/backlog"
	"github.com/auditlens/auditlens/services/ingest/cloudwatch"
	"github.com/auditlens/auditlens/services/ingest/file"
	"github.com/auditlens/auditlens/services/ingest/firehose"
	"github.com/auditlens/auditlens/services/ingest/input"
	"github.com/auditlens/auditlens/services/ingest/kafka"
	"github.com/auditlens/auditlens/services/ingest/metrics"
	"github.com/auditlens/auditlens/services/ingest/pubsub"
	"github.com/auditlens/auditlens/services/ingest/webhook"
)

// GCPercent is ingest's garbage-collector target unless GOGC is set. Ingest keeps little live
// heap (the batches in flight) while allocating briskly (a copy of every line, here and in
// an embedded NATS server), so the default of 100 collects every few milliseconds; at 400
// BenchmarkFile measured about 10% more events/s (see README). Config.MemoryLimit keeps the
// room this leaves from growing past what the inputs can hold.
const GCPercent = 400

// baseMemory is what ingest needs besides its inputs' batches and bodies: the runtime, the
// read buffer and the released line memory kept for reuse (tail.Follower), the bus client.
const baseMemory = 32 << 20

// Config is everything ingest is told; its zero value is not useful: start from
// DefaultConfig.
type Config struct {
	// MaxEventSize caps an event of any input; larger ones go to the dead-letter stream.
	MaxEventSize int
	// NodeName is sent with every event.
	NodeName string
	// Batch bounds the EventBatch messages every input publishes events in.
	Batch eventbatch.Config
	// Backlog holds every input's publishing back while classify is too far behind.
	Backlog  backlog.Config
	File     file.Config
	Webhook  webhook.Config
	Firehose firehose.Config
	PubSub   pubsub.Config
	Kafka    kafka.Config
	// CloudWatch keeps its position in File.CheckpointDir (--checkpoint-dir).
	CloudWatch cloudwatch.Config
	// Managed bounds what the managed sources (Firehose, Pub/Sub, Kafka, CloudWatch) decode:
	// per request or message, and all together in flight (one budget they share).
	Managed envelope.Limits
}

// DefaultConfig is the one place ingest's defaults are written, the checkpoints under
// dataRoot; every input is off until it is given its file, address or subscription.
func DefaultConfig(dataRoot string) Config {
	host, _ := os.Hostname()
	return Config{
		MaxEventSize: input.DefaultMaxEventSize,
		NodeName:     host,
		Batch:        eventbatch.DefaultConfig(),
		Backlog:      backlog.DefaultConfig(),
		File:         file.DefaultConfig(dataRoot),
		Webhook:      webhook.DefaultConfig(),
		Firehose:     firehose.DefaultConfig(),
		PubSub:       pubsub.DefaultConfig(),
		Kafka:        kafka.DefaultConfig(),
		CloudWatch:   cloudwatch.DefaultConfig(),
		Managed:      envelope.DefaultLimits(),
	}
}

// RegisterFlags adds ingest's flags to fs, each defaulting to the current value of its field.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.MaxEventSize, "max-event-size", c.MaxEventSize, "largest audit event in `bytes`; larger lines go to the dead-letter stream (keep it below the bus's max payload)")
	fs.StringVar(&c.NodeName, "node-name", c.NodeName, "name of this node, sent with every event")
	c.Batch.RegisterFlags(fs)
	c.Backlog.RegisterFlags(fs)
	c.File.RegisterFlags(fs)
	c.Webhook.RegisterFlags(fs)
	c.Firehose.RegisterFlags(fs)
	c.PubSub.RegisterFlags(fs)
	c.Kafka.RegisterFlags(fs)
	c.CloudWatch.RegisterFlags(fs)
	c.Managed.RegisterFlags(fs)
}

// MemoryLimit is ingest's soft memory limit unless GOMEMLIMIT is set: the most its inputs hold
// at once, with room to collect. The file input holds the lines and messages of up to
// --audit-log-publishers batches being published, the ones waiting for their turn to be
// checkpointed and the one being read (file.Config.Memory); the webhook, its request bodies
// (webhook.Config.Memory). Measured over 800 MB of audit log with the defaults: 23-26 MB live
// after each collection, against this limit of 64 MiB; without it the heap grew to 5x what was
// live (GCPercent) and the peak with the length of the input.
//
// The managed sources hold at most --managed-max-inflight-bytes of decoded envelopes and
// Firehose bodies (ManagedMemoryPerInflightByte per byte of it), plus what their clients
// fetch ahead: a Kafka poll (64 MiB; the few records queued behind it are not counted),
// the Pub/Sub messages outstanding (bounded by the same number of bytes).
func (c *Config) MemoryLimit() int64 {
	n := int64(baseMemory)
	if c.File.On() {
		n += c.File.Memory()
	}
	if c.Webhook.On() {
		n += c.Webhook.Memory()
	}
	if c.Firehose.On() || c.PubSub.On() || c.Kafka.On() || c.CloudWatch.On() {
		n += ManagedMemoryPerInflightByte * c.Managed.MaxInflight
	}
	if c.Kafka.On() {
		n += kafka.FetchMaxBytes
	}
	if c.PubSub.On() {
		n += c.Managed.MaxInflight
	}
	return n
}

// ManagedMemoryPerInflightByte is about how many bytes of memory the managed sources need per
// byte of decoded data in flight: the decoded bytes, the events copied out of them and the
// messages they are packed into, and what the collector leaves between collections.
const ManagedMemoryPerInflightByte = 3

var errNoInput = errors.New("give at least one input: --audit-log, --webhook-addr, --firehose-addr, --pubsub-subscription, --kafka-source-brokers, --eventhubs-connection-string-file or --cloudwatch-log-group")

// Validate checks the flags, naming the one at fault; it changes nothing.
func (c Config) Validate() error {
	if !c.File.On() && !c.Webhook.On() && !c.Firehose.On() && !c.PubSub.On() && !c.Kafka.On() && !c.CloudWatch.On() {
		return errNoInput
	}
	if err := c.File.Validate(); err != nil {
		return err
	}
	if c.MaxEventSize <= 0 || c.File.BatchSize <= 0 || c.File.BatchBytes <= 0 || c.File.Publishers <= 0 {
		return errors.New("--max-event-size, --audit-log-batch-size, --audit-log-batch-bytes and --audit-log-publishers must be positive")
	}
	for _, v := range []func() error{c.Batch.Validate, c.Backlog.Validate, c.Firehose.Validate, c.PubSub.Validate, c.Kafka.Validate, c.CloudWatch.Validate, c.Webhook.Validate} {
		if err := v(); err != nil {
			return err
		}
	}
	if c.Firehose.On() || c.PubSub.On() || c.Kafka.On() || c.CloudWatch.On() {
		if err := c.Managed.Validate(); err != nil {
			return err
		}
	}
	if c.Firehose.On() && c.Managed.MaxInflight < c.Firehose.MaxBody+c.Managed.MaxDecoded {
		return fmt.Errorf("--managed-max-inflight-bytes %d: must be at least the Firehose body limit (%d) plus --managed-max-decoded-bytes (%d), or the largest request could never be taken", c.Managed.MaxInflight, c.Firehose.MaxBody, c.Managed.MaxDecoded)
	}
	if c.CloudWatch.On() && c.File.CheckpointDir == "" {
		return errors.New("--cloudwatch-log-group needs --checkpoint-dir: its read position is kept there")
	}
	return nil
}

// New builds the inputs that are on: the file input, the webhook, the Firehose endpoint, the
// Pub/Sub and Kafka sources, the CloudWatch Logs reader. They share one input.Env: the bus
// (with Backlog on, one backlog.Gate in front of it, run as the first stage: it lets the
// inputs drain at shutdown), the metrics, the batches and the managed sources' one budget.
func New(cfg Config, d daemon.Deps) ([]daemon.Component, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// A nil *prometheus.Registry in the interface would not compare equal to nil: keep the
	// interface nil then, so that nothing is registered (as classify and report do).
	var reg prometheus.Registerer
	if d.Registry != nil {
		reg = d.Registry
	}
	logger := d.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var comps []daemon.Component
	var pub input.Bus = d.Bus
	if cfg.Backlog.On() {
		b, ok := d.Bus.(backlog.Bus)
		if !ok {
			return nil, fmt.Errorf("--bus-max-backlog: the bus (%T) cannot report a consumer group's backlog", d.Bus)
		}
		g := backlog.New(cfg.Backlog, b, logger, reg)
		comps = append(comps, daemon.ComponentFuncs{RunFunc: g.Run, ReadyFunc: g.Stalled})
		pub = g
	}
	// One budget of decoded bytes for all the managed sources: MemoryLimit counts it once.
	// Their limits are checked (Validate) only when one of them is on; else they are unused
	// and the env keeps its defaults.
	var limits envelope.Limits
	if cfg.Firehose.On() || cfg.PubSub.On() || cfg.Kafka.On() || cfg.CloudWatch.On() {
		limits = cfg.Managed
	}
	env, err := input.NewEnv(input.Env{Bus: pub, Cluster: d.Cluster, Node: cfg.NodeName, MaxEventSize: cfg.MaxEventSize,
		Logger: logger, Registry: reg, Metrics: metrics.New(reg), Batch: cfg.Batch, Limits: limits})
	if err != nil {
		return nil, err
	}
	cw := cfg.CloudWatch
	cw.CheckpointDir = cfg.File.CheckpointDir
	for _, in := range []struct {
		on  bool
		new func() (daemon.Component, error)
	}{
		{cfg.File.On(), func() (daemon.Component, error) { return file.New(cfg.File, env) }},
		{cfg.Webhook.On(), func() (daemon.Component, error) { return webhook.New(cfg.Webhook, env) }},
		{cfg.Firehose.On(), func() (daemon.Component, error) { return firehose.New(cfg.Firehose, env) }},
		{cfg.PubSub.On(), func() (daemon.Component, error) { return pubsub.New(context.Background(), cfg.PubSub, env) }},
		{cfg.Kafka.On(), func() (daemon.Component, error) { return kafka.New(cfg.Kafka, env) }},
		{cw.On(), func() (daemon.Component, error) { return cloudwatch.New(context.Background(), cw, env) }},
	} {
		if !in.on {
			continue
		}
		c, err := in.new()
		if err != nil {
			return nil, err
		}
		comps = append(comps, c)
	}
	return comps, nil
}
