// Package bus defines how auditlens services hand messages to each other: publish with an
// idempotency key, consume with an explicit acknowledgement after the downstream write.
//
// Implementations live in bus/natsbus (NATS JetStream, embedded or remote) and bus/kafkabus
// (Kafka); package transport picks one from flags.
package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/auditlens/auditlens/lib/reason"
)

// Stream names one flow of messages between two stages.
type Stream string

const (
	// Events carries one kube-apiserver audit Event (JSON) per message, from ingest to classify.
	Events Stream = "events"
	// Findings carries auditlens.v1.FindingBatch messages (protobuf, many findings each) from
	// classify to report; a message without the Auditlens-Message-Type header holds one
	// auditlens.v1.Finding (the format before batches).
	Findings Stream = "findings"
	// DeadLetter keeps input that could not be processed (bad lines, undecodable events),
	// with headers saying where it came from and why.
	DeadLetter Stream = "deadletter"
)

// Streams lists every stream, in pipeline order.
var Streams = []Stream{Events, Findings, DeadLetter}

// Header names every implementation carries with a message.
const (
	HeaderCluster = "Auditlens-Cluster"
	HeaderNode    = "Auditlens-Node"
	HeaderMsgID   = "Auditlens-Msg-Id"
	// HeaderInput names the ingest input an event arrived by: file, webhook, firehose,
	// cloudwatch, pubsub or kafka (classify reports which inputs a verdict rests on).
	HeaderInput = "Auditlens-Input"
	// HeaderSource says where a dead letter came from, e.g. "/var/log/audit.log:1234" or "webhook".
	HeaderSource = "Auditlens-Source"
	// HeaderReason says why a message went to the dead-letter stream.
	HeaderReason = "Auditlens-Reason"
	// HeaderReasonLabel is the same reason as a label of the reason vocabulary (too_large,
	// not_json, panic, ...): a bounded set, for counting.
	HeaderReasonLabel = "Auditlens-Reason-Label"
)

// Message is one unit of data on a stream.
type Message struct {
	Stream Stream
	// Cluster selects the subject (auditlens.<stream>.<token>) or Kafka key, token being
	// ClusterToken(Cluster); consumers see Cluster as it was. Required (ValidateClusterName).
	Cluster string
	// ID is the idempotency key: a message republished with the same ID within the
	// de-duplication window is stored once. Required.
	ID string
	// Header holds extra metadata (HeaderNode, HeaderSource, ...). May be nil, and may be
	// shared between messages: publishers only read it.
	Header map[string]string
	Data   []byte
}

// Delivery is a received message. The consumer must call exactly one of Ack, Nak or Term
// once the message has been written downstream (or definitely rejected).
type Delivery struct {
	Message
	// Position identifies the message in its stream for logs: "stream:seq" or "topic/partition@offset".
	Position string
	// Delivered counts deliveries of this message, 1 for the first.
	Delivered int

	Acker Acker
}

// Acker settles a delivery. Implementations are safe to call from any goroutine.
type Acker interface {
	// Ack confirms the message was processed; it will not be delivered again.
	Ack(ctx context.Context) error
	// Nak asks for redelivery after delay.
	Nak(delay time.Duration) error
	// Term gives up on the message for good (it is poison); it will not be redelivered.
	Term(reason string) error
}

// Ack confirms d. See Acker.
func (d *Delivery) Ack(ctx context.Context) error { return d.Acker.Ack(ctx) }

// Nak asks for redelivery of d after delay.
func (d *Delivery) Nak(delay time.Duration) error { return d.Acker.Nak(delay) }

// Term gives up on d.
func (d *Delivery) Term(reason string) error { return d.Acker.Term(reason) }

// Publisher stores messages on the bus.
type Publisher interface {
	// Publish stores every message and returns once the bus has acknowledged all of them,
	// or the first error. It blocks while too many messages are in flight (back-pressure).
	// Publishing the same IDs again after an error is safe.
	Publish(ctx context.Context, msgs ...Message) error
}

// Handler receives deliveries, one at a time, in the order the bus hands them out.
// It must not block for long: hand work to another goroutine and settle the delivery there.
type Handler func(ctx context.Context, d *Delivery)

// Consumer reads a stream as a member of a named group: members of one group share the
// work, each message goes to one member, unsettled messages are redelivered.
type Consumer interface {
	// Consume calls h for every delivery until ctx is done or the bus fails. It returns nil
	// when ctx was cancelled.
	Consume(ctx context.Context, h Handler) error
}

// Bus is an open connection to the message bus.
type Bus interface {
	Publisher
	// Consumer returns a consumer of stream s for group (a durable name shared by replicas).
	Consumer(s Stream, group string, opts ConsumerOptions) (Consumer, error)
	// Ready reports whether the bus is connected and usable now.
	Ready() error
	// Close releases the connection. It is idempotent.
	Close() error
}

// BacklogReader reports how far a consumer group is behind a stream; natsbus and kafkabus
// implement it (ingest holds publishing back with it, see services/ingest/backlog).
type BacklogReader interface {
	// Backlog is the number of messages of stream s that group has not acknowledged yet:
	// those not delivered yet plus those delivered but not settled (NATS: the consumer's
	// pending plus ack pending; Kafka: the group's lag, summed over the partitions). A group
	// that does not exist yet has the whole stream ahead of it.
	Backlog(ctx context.Context, s Stream, group string) (int64, error)
}

// ConsumerOptions tunes a consumer. Zero values take defaults.
type ConsumerOptions struct {
	// MaxUnacked bounds deliveries handed out but not yet settled (default 4096).
	MaxUnacked int
	// AckWait is how long the deliveries of a consumer that stopped (crashed, killed,
	// partitioned away) wait before they are redelivered: the recovery time after a crash
	// (default 30s). While the consumer lives, what it holds is kept however long it holds
	// it (NATS: an in-progress signal every AckWait/3; Kafka: nothing is redelivered before
	// its group's session times out), so a short AckWait costs no redeliveries.
	AckWait time.Duration
	// DrainTimeout bounds how long a stopping consumer waits for deliveries in flight to be
	// settled before it leaves them to redelivery (default 30s).
	DrainTimeout time.Duration
	// MaxDeliver bounds how often one message is handed to the handler (default
	// DefaultMaxDeliver). A message delivered that often without an Ack (Nak, AckWait expired,
	// the consumer crashed) is poison: on its next delivery it goes to the dead-letter stream
	// (HeaderReason, HeaderDelivered) and is terminated instead. It is a backstop: a consumer
	// that can tell a bad message should dead-letter it itself. Every delivery counts,
	// including the redeliveries of a message held or Nak'ed while its downstream is down
	// (AckWait expiring on it), and of every message in flight when a consumer crashes: set
	// it above what such outages take.
	MaxDeliver int
	// GaveUp, when set, is called for every message sent to the dead-letter stream because of
	// MaxDeliver (to count it).
	GaveUp func(d *Delivery)
}

// DefaultMaxDeliver is ConsumerOptions.MaxDeliver when not set.
const DefaultMaxDeliver = 50

// WithDefaults returns o with zero values replaced by defaults.
func (o ConsumerOptions) WithDefaults() ConsumerOptions {
	if o.MaxUnacked <= 0 {
		o.MaxUnacked = 4096
	}
	if o.AckWait <= 0 {
		o.AckWait = 30 * time.Second
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 30 * time.Second
	}
	if o.MaxDeliver <= 0 {
		o.MaxDeliver = DefaultMaxDeliver
	}
	return o
}

// ErrUnavailable wraps errors caused by the bus being unreachable; callers back off and retry.
var ErrUnavailable = errors.New("bus unavailable")

// ErrBacklog wraps the error of a publish that waited for the consumers of its stream to catch
// up (a bounded backlog, see BacklogReader) until its context ended: the bus is up, retry later.
var ErrBacklog = errors.New("the consumers are too far behind")

// ErrTooLarge wraps the refusal of a message larger than the bus accepts (NATS max_payload,
// Kafka message.max.bytes). Retrying does not help: cap what is published below the limit.
var ErrTooLarge = reason.New("message larger than the bus accepts", reason.TooLarge)

// Validate checks the fields every implementation needs.
func (m *Message) Validate() error {
	switch m.Stream {
	case Events, Findings, DeadLetter:
	default:
		return fmt.Errorf("%w: unknown stream %q", ErrInvalid, m.Stream)
	}
	if err := ValidateClusterName(m.Cluster); err != nil {
		return err
	}
	if m.ID == "" {
		return fmt.Errorf("%w: message without id", ErrInvalid)
	}
	return nil
}
