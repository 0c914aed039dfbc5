// Package transport turns the common bus flags (--nats-url, --kafka-brokers, --cluster, ...)
// into an open, instrumented bus.Bus.
package transport

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/kafkabus"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/flagenv"
)

// Config holds the bus flags shared by every service.
type Config struct {
	Cluster string
	NATS    natsbus.Config
	Kafka   kafkabus.Config
}

// RegisterFlags adds the bus flags to fs. defaultStore is the embedded server's store directory.
func (c *Config) RegisterFlags(fs *flag.FlagSet, defaultStore string) {
	fs.StringVar(&c.Cluster, "cluster", "default", "name of the cluster the audit events come from")
	fs.StringVar(&c.NATS.URL, "nats-url", natsbus.Embedded, "NATS `URL`(s), comma-separated, or \"embedded\" for an in-process server")
	fs.StringVar(&c.NATS.StoreDir, "nats-store-dir", defaultStore, "JetStream store `dir` of the embedded server")
	fs.StringVar(&c.NATS.EmbeddedListen, "nats-embedded-listen", "", "also expose the embedded server on `host:port` for other processes")
	fs.StringVar(&c.NATS.User, "nats-user", "", "NATS user name")
	fs.StringVar(&c.NATS.Password, "nats-password", "", "NATS password (prefer the env twin)")
	fs.StringVar(&c.NATS.Token, "nats-token", "", "NATS token (prefer the env twin)")
	fs.StringVar(&c.NATS.CredsFile, "nats-creds", "", "NATS credentials `file` (JWT + NKey)")
	fs.StringVar(&c.NATS.NKeyFile, "nats-nkey-file", "", "NATS NKey seed `file`")
	fs.StringVar(&c.NATS.TLSCAFile, "nats-tls-ca", "", "CA `file` to verify the NATS server")
	fs.StringVar(&c.NATS.TLSCertFile, "nats-tls-cert", "", "client certificate `file` for NATS mTLS")
	fs.StringVar(&c.NATS.TLSKeyFile, "nats-tls-key", "", "client key `file` for NATS mTLS")
	fs.DurationVar(&c.NATS.Duplicates, "nats-dedup-window", 0, "JetStream de-duplication window of the streams (0: 2m on a NATS server, 10s on the embedded one, whose memory holds every message id of the window)")
	fs.DurationVar(&c.NATS.MaxAge, "nats-max-age", 7*24*time.Hour, "how long the streams keep messages")
	fs.IntVar(&c.NATS.Replicas, "nats-replicas", 1, "replicas of each stream on a NATS cluster")
	fs.BoolVar(&c.NATS.OneAtATime, "nats-one-at-a-time", false, "publish every message on its own, even where the server offers batched publishing (nats-server 2.14+)")
	fs.Var((*flagenv.StringList)(&c.Kafka.Brokers), "kafka-brokers", "use Kafka instead of NATS: `host:port` list, comma-separated or repeated")
	fs.BoolVar(&c.Kafka.CreateTopics, "kafka-create-topics", true, "create the Kafka topics when missing")
	fs.IntVar(&c.Kafka.Partitions, "kafka-partitions", 6, "partitions of created Kafka topics")
	fs.IntVar(&c.Kafka.ReplicationFactor, "kafka-replication-factor", 1, "replicas of each partition of created Kafka topics (3 on a production cluster; at most its brokers)")
}

// EmbeddedDedupWindow is the default de-duplication window of the embedded server's streams.
// The server keeps every message id of the window in memory, ~200 bytes each: with the
// 2-minute window of a NATS server, the all-in-one catching up on a large audit log held an
// id per event read in the last two minutes (880 MB resident on a 207 MB log, 1.9 GB on
// 828 MB). Ten seconds still absorbs the republishing of a retried batch; what falls outside
// the window is counted once downstream anyway (see the README's delivery guarantees).
const EmbeddedDedupWindow = 10 * time.Second

// UseKafka reports whether Kafka was chosen.
func (c *Config) UseKafka() bool { return len(c.Kafka.Brokers) > 0 }

// Validate checks the chosen transport's settings.
func (c *Config) Validate() error {
	if err := bus.ValidateCluster(c.Cluster); err != nil {
		return fmt.Errorf("--cluster: %w", err)
	}
	if c.UseKafka() {
		return c.Kafka.Validate()
	}
	return c.NATS.Validate()
}

// Open connects the chosen bus and instruments it with metrics registered on reg (may be nil).
func Open(ctx context.Context, c Config, log *slog.Logger, reg prometheus.Registerer) (bus.Bus, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var (
		b   bus.Bus
		err error
	)
	if c.UseKafka() {
		c.Kafka.Logger = log
		b, err = kafkabus.Open(ctx, c.Kafka)
	} else {
		c.NATS.Logger = log
		if c.NATS.Duplicates <= 0 && c.NATS.URL == natsbus.Embedded {
			c.NATS.Duplicates = EmbeddedDedupWindow
		}
		b, err = natsbus.Open(ctx, c.NATS)
	}
	if err != nil {
		return nil, err
	}
	return Instrument(b, reg), nil
}
