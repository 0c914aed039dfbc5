package file

import (
	"strconv"
	"sync"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/envelope"
	"github.com/auditlens/auditlens/lib/reason"
	"github.com/auditlens/auditlens/services/ingest/metrics"
)

// Lines that are no audit event may be a managed cloud's envelope (lib/envelope): one line
// then gives any number of events. They all go into the line's batch, so the line is
// acknowledged (its position checkpointed) only when the bus has stored every one of them.

// envelopes are the decoders of the publishers (each converts its own batches).
var envelopes = sync.Pool{New: func() any { return envelope.NewDecoder(0) }}

// unwrap reads line as an envelope after Peek failed with peekErr: the events it holds
// (nil, peekErr when it is none).
func (in *Input) unwrap(line []byte, peekErr error) ([]envelope.Item, error) {
	if !envelope.Candidate(peekErr) {
		return nil, peekErr
	}
	d := envelopes.Get().(*envelope.Decoder)
	defer envelopes.Put(d)
	items, st, err := d.Split(line, in.env.MaxEventSize)
	if err != nil {
		return nil, peekErr
	}
	if st.Skipped > 0 {
		in.log.Debug("envelope records without audit events skipped", "records", st.Skipped, "reasons", st.Reasons)
	}
	if items == nil {
		items = []envelope.Item{}
	}
	return items, nil
}

// addEnvelope adds the events of one envelope line (at src) to b: good ones to the events
// stream (in p's batches, keyed "<offset>.<place in the line>"), bad ones to the dead-letter
// stream, each named by src and its place in the line.
func (in *Input) addEnvelope(b *batch, p *packer, src, fp string, offset int64, items []envelope.Item) {
	for i, it := range items {
		if it.Err == nil && p.Fits(len(it.Raw)) {
			b.Events++
			p.add(b, it.Raw, strconv.FormatInt(offset, 10)+"."+strconv.Itoa(i+1))
			continue
		}
		b.srcs = append(b.srcs, src)
		id := bus.EventID(in.cluster, it.Key())
		if err := it.Err; err != nil {
			label := reason.Of(err)
			in.log.Warn("bad audit event in an envelope line sent to the dead-letter stream", "source", src, "event", i+1, "reason", label, "err", bus.Short(err.Error(), 200))
			b.AddBad(label, 1)
			b.msgs = append(b.msgs, in.env.DeadLetter(in.cluster, metrics.File, fp+"/"+strconv.FormatInt(offset, 10)+"/"+strconv.Itoa(i+1), src, err, it.Raw))
			continue
		}
		b.Events++
		b.msgs = append(b.msgs, bus.Message{Stream: bus.Events, Cluster: in.cluster, ID: id, Header: in.eventHeader, Data: it.Raw})
	}
}
