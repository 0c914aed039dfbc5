// Package classify is the classify service: it consumes audit events from the bus, matches
// them against the rule catalogue and publishes the findings of each batch of events in
// protobuf FindingBatch messages, acknowledging each event only once its findings are stored.
package classify

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/lib/flagenv"
	"github.com/auditlens/auditlens/services/classify/dedup"
	"github.com/auditlens/auditlens/services/classify/rules"
)

// Config is everything the service needs; its zero value is not useful: start from
// DefaultConfig.
type Config struct {
	// Group is the consumer group shared by replicas.
	Group string
	// RulesFiles add to or override the embedded catalogue.
	RulesFiles flagenv.StringList
	// Workers decode and classify in parallel.
	Workers int
	// BatchSize bounds the events one worker settles together.
	BatchSize int
	// BatchWait bounds how long a worker waits to fill a batch.
	BatchWait time.Duration
	// MaxEventSize rejects larger events to the dead-letter stream.
	MaxEventSize int
	// DedupWindow is the number of finding keys remembered.
	DedupWindow int
	// MaxUnacked bounds deliveries in flight.
	MaxUnacked int
	// AckWait is the recovery time after a crash: how long the events a stopped classify
	// held wait before the bus redelivers them (a live one keeps what it holds, see
	// bus.ConsumerOptions.AckWait). It also bounds one publish of findings.
	AckWait time.Duration
	// FindingsMessageBytes bounds one FindingBatch message.
	FindingsMessageBytes int
	// FindingsCompression compresses each FindingBatch message (eventbatch.CompressionS2,
	// CompressionZstd or CompressionNone); report reads all three.
	FindingsCompression string
	// HeartbeatInterval is how often the minutes of event time that carried events, and the
	// releases the control plane named, are published per cluster (Heartbeat messages on the
	// findings stream); 0 turns it off.
	HeartbeatInterval time.Duration
}

// DefaultFindingsMessageBytes is the default of --classify-findings-message-bytes: about 45
// findings of 700 bytes per message. It stays far below the bus limits (NATS max_payload
// and Kafka message.max.bytes, 1 MiB by default) and keeps what report pulls at once small:
// it pulls up to 1000 messages, and with 64 KiB messages the embedded NATS server closed the
// connection (1000 x 64 KiB is the 64 MiB a client may have pending) and the pulled messages
// came back only after the ack wait.
const DefaultFindingsMessageBytes = 32 << 10

// DefaultConfig is the one place defaults are written: the flags show and start from these
// values.
func DefaultConfig() Config {
	return Config{
		Group:                "classify",
		Workers:              2,
		BatchSize:            256,
		BatchWait:            20 * time.Millisecond,
		MaxEventSize:         4 << 20,
		DedupWindow:          dedup.DefaultSize,
		MaxUnacked:           4096,
		AckWait:              10 * time.Second,
		FindingsMessageBytes: DefaultFindingsMessageBytes,
		FindingsCompression:  eventbatch.CompressionS2,
		HeartbeatInterval:    10 * time.Second,
	}
}

// RegisterFlags registers the service's flags on fs, each defaulting to the current value of
// its field (names prefixed so they can share a flag set with the other services in an
// all-in-one binary).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Group, "classify-group", c.Group, "consumer `group` shared by classify replicas")
	fs.Var(&c.RulesFiles, "rules-file", "extra catalogue `files`, comma-separated or repeated, that add or override rules")
	fs.IntVar(&c.Workers, "classify-workers", c.Workers, "goroutines decoding and classifying events")
	fs.IntVar(&c.BatchSize, "classify-batch-size", c.BatchSize, "events settled together per worker")
	fs.DurationVar(&c.BatchWait, "classify-batch-wait", c.BatchWait, "longest wait to fill a batch")
	fs.IntVar(&c.MaxEventSize, "classify-max-event-size", c.MaxEventSize, "largest event accepted, in bytes; larger ones go to the dead-letter stream")
	fs.IntVar(&c.DedupWindow, "classify-dedup-window", c.DedupWindow, "finding keys remembered to merge the stages of one request")
	fs.IntVar(&c.MaxUnacked, "classify-max-unacked", c.MaxUnacked, "events delivered but not yet settled")
	fs.DurationVar(&c.AckWait, "classify-ack-wait", c.AckWait, "after a crash, how long the events it held wait before they are redelivered (a running classify keeps what it holds)")
	fs.IntVar(&c.FindingsMessageBytes, "classify-findings-message-bytes", c.FindingsMessageBytes,
		"largest message of findings (a FindingBatch) published, in bytes; a larger finding goes alone. Keep it below the bus limit and report's --report-max-finding-bytes")
	fs.StringVar(&c.FindingsCompression, "classify-findings-compression", c.FindingsCompression,
		"compression of a message of findings: s2, zstd or none (report before this version reads only none: upgrade report first)")
	fs.DurationVar(&c.HeartbeatInterval, "classify-heartbeat-interval", c.HeartbeatInterval,
		"how often the minutes that carried events are published per cluster, so report tells a live cluster without findings from a silent one; 0 turns it off (report before this version dead-letters heartbeats: upgrade report first)")
}

// Validate checks c and never changes it. The rule files must be readable; they are loaded
// (and their content checked) once, by New.
func (c Config) Validate() error {
	if c.Group == "" {
		return errors.New("--classify-group is empty: name the consumer group")
	}
	for _, f := range []struct {
		name  string
		value int
	}{
		{"classify-workers", c.Workers}, {"classify-batch-size", c.BatchSize}, {"classify-max-event-size", c.MaxEventSize},
		{"classify-dedup-window", c.DedupWindow}, {"classify-max-unacked", c.MaxUnacked}, {"classify-findings-message-bytes", c.FindingsMessageBytes},
	} {
		if f.value < 1 {
			return fmt.Errorf("--%s %d: want 1 or more", f.name, f.value)
		}
	}
	for _, f := range []struct {
		name  string
		value time.Duration
	}{{"classify-batch-wait", c.BatchWait}, {"classify-ack-wait", c.AckWait}} {
		if f.value <= 0 {
			return fmt.Errorf("--%s %s: want more than 0", f.name, f.value)
		}
	}
	if c.HeartbeatInterval < 0 {
		return fmt.Errorf("--classify-heartbeat-interval %s: want 0 (off) or more", c.HeartbeatInterval)
	}
	if c.FindingsMessageBytes > 1<<20 {
		return fmt.Errorf("--classify-findings-message-bytes %d: want at most 1048576 (the bus and report's --report-max-finding-bytes default)", c.FindingsMessageBytes)
	}
	switch c.FindingsCompression {
	case eventbatch.CompressionNone, eventbatch.CompressionS2, eventbatch.CompressionZstd:
	default:
		return fmt.Errorf("--classify-findings-compression %q: want s2, zstd or none", c.FindingsCompression)
	}
	if c.BatchSize > c.MaxUnacked {
		return fmt.Errorf("--classify-batch-size %d is larger than --classify-max-unacked %d", c.BatchSize, c.MaxUnacked)
	}
	for _, name := range c.RulesFiles {
		f, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("--rules-file: %w", err)
		}
		_ = f.Close()
	}
	return nil
}

// New builds the service's one stage on d (d.Bus is required), loading the rule catalogue
// with c.RulesFiles.
func New(cfg Config, d daemon.Deps) ([]daemon.Component, error) {
	s, err := newService(cfg, d)
	if err != nil {
		return nil, err
	}
	return []daemon.Component{s}, nil
}

// newService is New returning the concrete stage.
func newService(cfg Config, d daemon.Deps) (*service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Bus == nil {
		return nil, errors.New("no bus")
	}
	cat, err := rules.Load(cfg.RulesFiles...)
	if err != nil {
		return nil, err
	}
	return newStage(cfg, d, rules.NewEngine(cat)), nil
}
