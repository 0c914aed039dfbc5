package file

import (
	"strings"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/services/ingest/tail"
)

// Events travel in EventBatch messages (lib/bus/eventbatch): runs of consecutive events of
// one file, named by the file's fingerprint and the offsets of their first and last line, so
// that the same lines read again (after a crash, before their checkpoint was saved) make the
// same messages, which the bus stores once. A batch is part of the read batch its lines came
// in, so the checkpoint moves past it only once it is stored.

// packer packs the events of one file into EventBatch messages.
type packer struct {
	*eventbatch.Packer
	fp, name, prefix string
}

func (in *Input) newPacker(c tail.Chunk) *packer {
	fp := c.Pos.File.Fingerprint
	if len(fp) > 16 {
		fp = fp[:16]
	}
	prefix := in.cluster + "/file/" + fp
	return &packer{Packer: eventbatch.NewPacker(in.env.Batch, in.cluster, prefix, eventbatch.ByRange, in.eventHeader),
		fp: c.Pos.File.Fingerprint, name: c.Name, prefix: prefix}
}

// add appends event ev (key: its offset in the file, and its place in an envelope line) to
// the batch being filled, sealing full ones into b.
func (p *packer) add(b *batch, ev []byte, key string) {
	n := len(b.msgs)
	b.msgs = p.Add(b.msgs, ev, key)
	p.sources(b, n)
}

// flush seals the batch being filled into b.
func (p *packer) flush(b *batch) {
	n := len(b.msgs)
	b.msgs = p.Flush(b.msgs)
	p.sources(b, n)
}

// sources names the batch messages sealed into b from index n on: "<file>:<first offset>-<last
// offset>", in b.srcs and as their HeaderSource (which classify's dead letters quote).
func (p *packer) sources(b *batch, n int) {
	for i := n; i < len(b.msgs); i++ {
		src := p.name + ":" + strings.TrimPrefix(b.msgs[i].ID, p.prefix+"/")
		b.msgs[i].Header[bus.HeaderSource] = src // Flush made the map for this message
		b.srcs = append(b.srcs, src)
	}
}
