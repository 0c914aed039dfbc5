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
	out := make([]bus.Message, 0, len(msgs)/8+1)
	var p *Packer
	var run *bus.Message // the first message of the run being packed
	for i := range msgs {
		m := &msgs[i]
		fits := m.Stream == bus.Events && !IsBatch(m.Header) && (&Packer{cfg: cfg}).Fits(len(m.Data))
		if p != nil && (!fits || m.Cluster != run.Cluster || !maps.Equal(m.Header, run.Header)) {
			out, p, run = p.Flush(out), nil, nil
		}
		if !fits {
			out = append(out, *m)
			continue
		}
		if p == nil {
			p, run = NewPacker(cfg, m.Cluster, m.Cluster+"/batch", ByHash, m.Header), m
		}
		out = p.Add(out, m.Data, m.ID)
	}
	if p != nil {
		out = p.Flush(out)
	}
	return out
}
