// Package eventbatch packs runs of audit events into one bus message, the protobuf
// auditlens.v1.EventBatch (proto/auditlens/v1/event.proto), compressed as a whole when
// configured, and reads such messages back.
//
// One message per many events saves the bus a store write, an acknowledgement, a delivery and
// a de-duplication entry per event. A message on the events stream without HeaderMessageType
// is one audit Event as JSON (the format before batches); readers take both.
package eventbatch

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"hash"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/reason"
)

// Headers of a batch message.
const (
	// HeaderMessageType names the payload: MessageType for a batch (the header findings
	// batches carry too, auditlensv1.MessageTypeHeader).
	HeaderMessageType = "Auditlens-Message-Type"
	// MessageType is the full protobuf name of the payload (auditlensv1.EventBatchMessageType).
	MessageType = "auditlens.v1.EventBatch"
	// HeaderEncoding names the codec of a compressed payload: CompressionS2 or
	// CompressionZstd. Absent: the EventBatch as it is.
	HeaderEncoding = "Auditlens-Encoding"
	// HeaderEvents is the number of events in the batch (for consumers that fill their own
	// batches by events, before decoding).
	HeaderEvents = "Auditlens-Events"
)

// Compressions of a batch's payload.
const (
	CompressionNone = "none"
	CompressionS2   = "s2"
	CompressionZstd = "zstd"
)

// MaxBytesLimit bounds Config.MaxBytes and what a reader decompresses from one message.
const MaxBytesLimit = 16 << 20

// Config bounds the batches a publisher builds; start from DefaultConfig.
type Config struct {
	// MaxEvents is the most events in one message; 1 turns batches off (one message per
	// event, the format before batches).
	MaxEvents int
	// MaxBytes is the most bytes of events in one message, before compression. An event
	// larger than this goes alone, as a single-event message.
	MaxBytes int
	// Compression of the payload: CompressionNone, CompressionS2 or CompressionZstd.
	Compression string
}

// DefaultConfig is the one place the defaults are written. 256 KiB of events (about 220
// events of 1.2 KB) stays far below the 1 MiB that NATS (max_payload) and Kafka
// (message.max.bytes) accept by default even uncompressed, and keeps what a consumer pulls at
// once (up to 1000 messages, 16 MiB) bounded. S2 compresses real audit events about 4 to 1
// for little CPU; see BenchmarkPack.
func DefaultConfig() Config {
	return Config{MaxEvents: 1024, MaxBytes: 256 << 10, Compression: CompressionS2}
}

// OrDefault is c, or DefaultConfig when c is the zero value (an input's Options left unset).
func (c Config) OrDefault() Config {
	if c == (Config{}) {
		return DefaultConfig()
	}
	return c
}

// RegisterFlags adds the --bus-batch-* flags to fs, each defaulting to the current value of
// its field.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.MaxEvents, "bus-batch-max-events", c.MaxEvents, "most audit events published in one bus message; 1 publishes one message per event (the format before batches)")
	fs.IntVar(&c.MaxBytes, "bus-batch-max-bytes", c.MaxBytes, "most `bytes` of audit events in one bus message, before compression; keep it below the bus's max payload (a larger event goes alone)")
	fs.StringVar(&c.Compression, "bus-batch-compression", c.Compression, "compression of a bus message of events: none, s2 or zstd")
}

// On reports whether events are batched.
func (c Config) On() bool { return c.MaxEvents > 1 }

// Validate checks c, naming the flag at fault; it changes nothing.
func (c Config) Validate() error {
	if c.MaxEvents < 1 {
		return fmt.Errorf("--bus-batch-max-events %d: want 1 (no batches) or more", c.MaxEvents)
	}
	if c.MaxBytes < 1 || c.MaxBytes > MaxBytesLimit {
		return fmt.Errorf("--bus-batch-max-bytes %d: want 1 to %d", c.MaxBytes, MaxBytesLimit)
	}
	switch c.Compression {
	case CompressionNone, CompressionS2, CompressionZstd:
	default:
		return fmt.Errorf("--bus-batch-compression %q: want none, s2 or zstd", c.Compression)
	}
	return nil
}

// IDMode says how a Packer names its messages.
type IDMode int

const (
	// ByRange names a batch by the keys of its first and last event: for a file, whose keys
	// are byte offsets, the byte range of the run.
	ByRange IDMode = iota
	// ByHash names a batch by a hash of every event's key: for input without positions (a
	// webhook request, whose keys are audit ids and stages).
	ByHash
)

// Packer packs events of one cluster into batch messages. It is not safe for concurrent use.
type Packer struct {
	cfg     Config
	cluster string
	prefix  string
	mode    IDMode
	extra   map[string]string

	data        []byte // the EventBatch being filled, in wire format
	scratch     []byte // compression's output, before it is copied to its exact size
	n           int
	first, last string
	keys        hash.Hash
}

// NewPacker returns a packer of events of cluster into messages named
// "<prefix>/<first key>-<last key>" (ByRange) or "<prefix>/<hash of the keys>" (ByHash),
// bounded by bus.BoundID. extra headers (the node) go on every message.
func NewPacker(cfg Config, cluster, prefix string, mode IDMode, extra map[string]string) *Packer {
	p := &Packer{cfg: cfg, cluster: cluster, prefix: prefix, mode: mode, extra: extra}
	if mode == ByHash {
		p.keys = sha256.New()
	}
	return p
}

// Fits reports whether an event of n bytes goes into batches; a larger one (or any, with
// batches off) is the caller's to publish alone.
func (p *Packer) Fits(n int) bool {
	return p.cfg.MaxEvents > 1 && protowire.SizeTag(1)+protowire.SizeBytes(n) <= p.cfg.MaxBytes
}

// Add appends event ev, named key in its source, to the batch being filled; when ev does not
// fit there, the batch is sealed first and appended to dst. ev must satisfy Fits. Add copies
// ev.
func (p *Packer) Add(dst []bus.Message, ev []byte, key string) []bus.Message {
	size := protowire.SizeTag(1) + protowire.SizeBytes(len(ev))
	if p.n > 0 && (p.n >= p.cfg.MaxEvents || len(p.data)+size > p.cfg.MaxBytes) {
		dst = p.Flush(dst)
	}
	if p.data == nil {
		p.data = make([]byte, 0, min(p.cfg.MaxBytes, max(size, 64<<10)))
	}
	p.data = protowire.AppendTag(p.data, 1, protowire.BytesType)
	p.data = protowire.AppendBytes(p.data, ev)
	if p.n == 0 {
		p.first = key
	}
	p.last = key
	if p.keys != nil {
		_, _ = p.keys.Write([]byte(key))
		_, _ = p.keys.Write([]byte{0})
	}
	p.n++
	return dst
}

// Flush seals the batch being filled, if any, and appends it to dst.
func (p *Packer) Flush(dst []bus.Message) []bus.Message {
	if p.n == 0 {
		return dst
	}
	var id string
	if p.mode == ByHash {
		id = p.prefix + "/" + hex.EncodeToString(p.keys.Sum(nil)[:16])
		p.keys.Reset()
	} else {
		id = p.prefix + "/" + p.first + "-" + p.last
	}
	h := make(map[string]string, len(p.extra)+3)
	for k, v := range p.extra {
		h[k] = v
	}
	h[HeaderMessageType] = MessageType
	h[HeaderEvents] = strconv.Itoa(p.n)
	data := p.data
	if c := p.cfg.Compression; c != CompressionNone {
		data, p.scratch = Compress(c, data, p.scratch)
		h[HeaderEncoding] = c
		p.data = p.data[:0] // the raw buffer is ours again
	} else {
		p.data = nil // the message keeps it
	}
	p.n = 0
	return append(dst, bus.Message{Stream: bus.Events, Cluster: p.cluster, ID: bus.BoundID(id), Header: h, Data: data})
}

// IsBatch reports whether a message with header h holds an EventBatch.
func IsBatch(h map[string]string) bool { return h[HeaderMessageType] == MessageType }

// Count is how many events a message with header h holds: HeaderEvents of a batch (at least
// 1), 1 for any other message.
func Count(h map[string]string) int {
	if !IsBatch(h) {
		return 1
	}
	n, err := strconv.Atoi(h[HeaderEvents])
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// ErrBad marks a batch message that cannot be read: unknown encoding, broken compression or
// framing, or more than MaxBytesLimit once decompressed.
var ErrBad = reason.New("unreadable batch of events", reason.BadBatch)

// Events appends the events of the batch payload data (sent with header h) to dst. The
// returned slices point into data or into buf (the decompressed payload, reused when large
// enough), which is returned too: keep both until the events are no longer used.
func Events(h map[string]string, data, buf []byte, dst [][]byte) ([][]byte, []byte, error) {
	raw, buf, err := Decompress(h, data, buf)
	if err != nil {
		return dst, buf, err
	}
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return dst, buf, fmt.Errorf("%w: %w", ErrBad, protowire.ParseError(n))
		}
		raw = raw[n:]
		if num != 1 || typ != protowire.BytesType {
			// A field of a later version: skip it.
			if n = protowire.ConsumeFieldValue(num, typ, raw); n < 0 {
				return dst, buf, fmt.Errorf("%w: %w", ErrBad, protowire.ParseError(n))
			}
			raw = raw[n:]
			continue
		}
		ev, n := protowire.ConsumeBytes(raw)
		if n < 0 {
			return dst, buf, fmt.Errorf("%w: %w", ErrBad, protowire.ParseError(n))
		}
		dst = append(dst, ev)
		raw = raw[n:]
	}
	return dst, buf, nil
}
