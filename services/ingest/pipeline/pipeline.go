// Package pipeline wires ingest's inputs (audit log files, the audit webhook) to the bus.
package pipeline

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/services/ingest/firehose"
	"github.com/auditlens/auditlens/services/ingest/kafka"
	"github.com/auditlens/auditlens/services/ingest/metrics"
	"github.com/auditlens/auditlens/services/ingest/pubsub"
	"github.com/auditlens/auditlens/services/ingest/tail"
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

// MemoryLimit is ingest's soft memory limit unless GOMEMLIMIT is set: the most its inputs hold
// at once, with room to collect. The file input holds the lines and messages of up to
// --audit-log-publishers batches being published, the ones waiting for their turn to be
// checkpointed and the one being read (--audit-log-batch-bytes each); the webhook, its request
// bodies (webhook.Config.Memory). Measured over 800 MB of audit log with the defaults: 23-26
// MB live after each collection, against this limit of 64 MiB; without it the heap grew to 5x
// what was live (GCPercent) and the peak with the length of the input.
//
// The managed-cluster sources (Firehose, Pub/Sub, Kafka) are not measured yet: with any of
// them on there is no default limit (0).
func (c *Config) MemoryLimit() int64 {
	o := c.withDefaults()
	if o.Firehose.Addr != "" || o.PubSub.Subscription != "" || o.KafkaSource.On() {
		return 0
	}
	n := int64(baseMemory)
	if o.AuditLog != "" {
		n += int64(o.Publishers+2) * int64(o.BatchBytes)
	}
	if o.Webhook.Addr != "" {
		n += o.Webhook.Memory()
	}
	return n
}

// Config is everything ingest is told.
type Config struct {
	AuditLog      string
	CheckpointDir string
	StartAt       string
	MaxEventSize  int
	BatchSize     int
	BatchBytes    int
	Publishers    int
	PollInterval  time.Duration
	DrainTimeout  time.Duration
	NodeName      string
	Webhook       webhook.Config
	Firehose      firehose.Config
	PubSub        pubsub.Config
	KafkaSource   kafka.Config
}

// RegisterFlags adds ingest's flags to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	host, _ := os.Hostname()
	fs.StringVar(&c.AuditLog, "audit-log", "", "follow this audit log `file` (the apiserver's --audit-log-path) and its rotated siblings")
	fs.StringVar(&c.CheckpointDir, "checkpoint-dir", filepath.Join(daemon.DefaultDataDir(), "checkpoints"), "`dir` where the read position of --audit-log is kept")
	fs.StringVar(&c.StartAt, "start-at", tail.StartBeginning, "without a checkpoint, start at the beginning (oldest rotated file) or the end of the audit log")
	fs.IntVar(&c.MaxEventSize, "max-event-size", 1000000, "largest audit event in `bytes`; larger lines go to the dead-letter stream (keep it below the bus's max payload)")
	fs.IntVar(&c.BatchSize, "audit-log-batch-size", 4096, "most lines published in one batch")
	fs.IntVar(&c.BatchBytes, "audit-log-batch-bytes", 8<<20, "most `bytes` published in one batch")
	fs.IntVar(&c.Publishers, "audit-log-publishers", 2, "batches published concurrently (checkpoints still advance in order)")
	fs.DurationVar(&c.PollInterval, "audit-log-poll-interval", 200*time.Millisecond, "how often an idle audit log is checked for new lines and rotation")
	fs.DurationVar(&c.DrainTimeout, "audit-log-drain-timeout", 30*time.Second, "on shutdown, how long read lines may wait for the bus")
	fs.StringVar(&c.NodeName, "node-name", host, "name of this node, sent with every event")
	c.Webhook.RegisterFlags(fs)
	c.Firehose.RegisterFlags(fs)
	c.PubSub.RegisterFlags(fs)
	c.KafkaSource.RegisterFlags(fs)
}

func (c *Config) withDefaults() Config {
	o := *c
	if o.StartAt == "" {
		o.StartAt = tail.StartBeginning
	}
	if o.MaxEventSize <= 0 {
		o.MaxEventSize = 1000000
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 4096
	}
	if o.BatchBytes <= 0 {
		o.BatchBytes = 8 << 20
	}
	if o.Publishers <= 0 {
		o.Publishers = 2
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 200 * time.Millisecond
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 30 * time.Second
	}
	if o.NodeName == "" {
		o.NodeName, _ = os.Hostname()
	}
	return o
}

// Validate checks the flags, naming the one at fault.
func (c *Config) Validate() error {
	if c.AuditLog == "" && c.Webhook.Addr == "" && c.Firehose.Addr == "" && c.PubSub.Subscription == "" && !c.KafkaSource.On() {
		return errNoInput
	}
	if c.AuditLog != "" {
		if err := (tail.Config{Path: c.AuditLog, StartAt: c.StartAt}).Validate(); err != nil {
			return err
		}
		if fi, err := os.Stat(c.AuditLog); err == nil && fi.IsDir() {
			return fmt.Errorf("--audit-log %s is a directory: give the audit log file", c.AuditLog)
		}
		if c.CheckpointDir == "" {
			return fmt.Errorf("--audit-log needs --checkpoint-dir")
		}
	}
	if c.MaxEventSize < 0 || c.BatchSize < 0 || c.BatchBytes < 0 || c.Publishers < 0 {
		return fmt.Errorf("--max-event-size, --audit-log-batch-size, --audit-log-batch-bytes and --audit-log-publishers must be positive")
	}
	if err := c.Firehose.Validate(); err != nil {
		return err
	}
	if err := c.PubSub.Validate(); err != nil {
		return err
	}
	if err := c.KafkaSource.Validate(); err != nil {
		return err
	}
	return c.Webhook.Validate()
}

// New builds the inputs: the file input when --audit-log is set, the webhook when
// --webhook-addr is set.
func New(cfg Config, d daemon.Deps) ([]daemon.Component, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
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
	m := metrics.New(reg)
	var comps []daemon.Component
	if c.AuditLog != "" {
		in, err := NewFileInput(c, d.Bus, d.Cluster, logger, reg, m)
		if err != nil {
			return nil, err
		}
		comps = append(comps, in)
	}
	if c.Webhook.Addr != "" {
		s, err := webhook.New(c.Webhook, d.Bus, webhook.Options{Cluster: d.Cluster, Node: c.NodeName, MaxEventSize: c.MaxEventSize, Logger: logger, Metrics: m})
		if err != nil {
			return nil, err
		}
		comps = append(comps, s)
	}
	if c.Firehose.Addr != "" {
		s, err := firehose.New(c.Firehose, d.Bus, firehose.Options{Cluster: d.Cluster, Node: c.NodeName, MaxEventSize: c.MaxEventSize, Logger: d.Logger, Metrics: m})
		if err != nil {
			return nil, err
		}
		comps = append(comps, s)
	}
	if c.PubSub.Subscription != "" {
		s, err := pubsub.New(context.Background(), c.PubSub, d.Bus, pubsub.Options{Cluster: d.Cluster, Node: c.NodeName, MaxEventSize: c.MaxEventSize, Logger: d.Logger, Metrics: m})
		if err != nil {
			return nil, err
		}
		comps = append(comps, s)
	}
	if c.KafkaSource.On() {
		s, err := kafka.New(c.KafkaSource, d.Bus, kafka.Options{Cluster: d.Cluster, Node: c.NodeName, MaxEventSize: c.MaxEventSize, Logger: d.Logger, Metrics: m})
		if err != nil {
			return nil, err
		}
		comps = append(comps, s)
	}
	return comps, nil
}
