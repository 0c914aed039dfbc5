package eventbatch

import (
	"maps"

	"github.com/auditlens/auditlens/lib/bus"
)

// Pack is for inputs that build one message per event first (the managed sources: Kafka,
// CloudWatch, Firehose, Pub/Sub): it returns msgs with each run of consecutive single-event
// messages of one cluster and one header packed into batches, named
// "<cluster>/batch/<hash of the events' message ids>", so the same run of events gets the same
// id again and the bus drops a re-sent one. Dead letters and events too large for a batch stay
// as they were, in their place. With batches off it returns msgs.
func Pack(cfg Config, msgs []bus.Message) []bus.Message {
	if !cfg.On() {
		return msgs
	}
	s := NewStream(cfg, len(msgs)/8+1)
	for i := range msgs {
		s.Add(msgs[i])
	}
	return s.Messages()
}

// Stream is Pack for messages that come one at a time: an input that decodes a large request
// adds each event as it is decoded, and holds the packed batches, not every event twice.
type Stream struct {
	cfg     Config
	out     []bus.Message
	p       *Packer
	cluster string            // of the run being packed
	header  map[string]string // of the run being packed
}

// NewStream starts a stream with room for capacity messages.
func NewStream(cfg Config, capacity int) *Stream {
	return &Stream{cfg: cfg, out: make([]bus.Message, 0, capacity)}
}

// Add adds m: packed into the current run when it is a single event of the run's cluster and
// header that fits a batch, else in its place after the run.
func (s *Stream) Add(m bus.Message) {
	if !s.cfg.On() {
		s.out = append(s.out, m)
		return
	}
	fits := m.Stream == bus.Events && !IsBatch(m.Header) && (&Packer{cfg: s.cfg}).Fits(len(m.Data))
	if s.p != nil && (!fits || m.Cluster != s.cluster || !maps.Equal(m.Header, s.header)) {
		s.out, s.p = s.p.Flush(s.out), nil
	}
	if !fits {
		s.out = append(s.out, m)
		return
	}
	if s.p == nil {
		s.p, s.cluster, s.header = NewPacker(s.cfg, m.Cluster, m.Cluster+"/batch", ByHash, m.Header), m.Cluster, m.Header
	}
	s.out = s.p.Add(s.out, m.Data, m.ID)
}

// Messages flushes the run being packed and returns every message added, packed.
func (s *Stream) Messages() []bus.Message {
	if s.p != nil {
		s.out, s.p = s.p.Flush(s.out), nil
	}
	return s.out
}
