package classify

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"hash"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
)

// findingBatch packs the findings of one cluster into FindingBatch messages of at most
// maxBytes each (a finding larger than that goes alone), so the bus stores and acknowledges
// one message per many findings. A worker keeps its findingBatches from one settle to the
// next (reset): the message being filled grows in data, kept, and is copied out at its
// exact size when sealed, so filling a message allocates nothing once warm.
type findingBatch struct {
	cluster     string
	maxBytes    int
	compression string // of each message: eventbatch.Compression*
	scratch     []byte // compression's output, reused
	// data is the FindingBatch being filled, in wire format: each finding as field 1.
	data []byte
	// ids hashes the identity keys of the findings in data: the message id.
	ids    hash.Hash
	n      int
	sealed []bus.Message
}

func newFindingBatch(cluster string, maxBytes int, compression string) *findingBatch {
	return &findingBatch{cluster: cluster, maxBytes: maxBytes, compression: compression, ids: sha256.New()}
}

// reset empties b for the findings of cluster, keeping its buffer unless a finding larger
// than a message grew it beyond that.
func (b *findingBatch) reset(cluster string) {
	b.cluster, b.n, b.sealed = cluster, 0, nil
	b.data = b.data[:0]
	if cap(b.data) > 2*b.maxBytes {
		b.data = nil
	}
	b.ids.Reset()
}

// add appends f, identified by key, starting a new message first when f would not fit.
func (b *findingBatch) add(key string, f *auditlensv1.Finding) error {
	size := proto.Size(f)
	if b.n > 0 && len(b.data)+protowire.SizeTag(1)+protowire.SizeBytes(size) > b.maxBytes {
		b.seal()
	}
	before := len(b.data)
	b.data = protowire.AppendTag(b.data, 1, protowire.BytesType)
	b.data = protowire.AppendVarint(b.data, uint64(size))
	data, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b.data, f)
	if err != nil {
		b.data = b.data[:before]
		return err
	}
	b.data = data
	_, _ = b.ids.Write([]byte(key))
	_, _ = b.ids.Write([]byte{0})
	b.n++
	return nil
}

// seal closes the message being filled. Its id is "<cluster>/batch/<hash of the identity
// keys it holds>": the same findings re-published in the same composition (a retry) are
// de-duplicated by the bus; in another composition (after a restart) they are stored again
// and counted once downstream by their identity.
func (b *findingBatch) seal() {
	if b.n == 0 {
		return
	}
	id := b.cluster + "/batch/" + hex.EncodeToString(b.ids.Sum(nil)[:16])
	h := map[string]string{auditlensv1.MessageTypeHeader: auditlensv1.FindingBatchMessageType}
	var data []byte
	data, b.scratch = eventbatch.Compress(b.compression, b.data, b.scratch)
	if b.compression == eventbatch.CompressionNone {
		data = bytes.Clone(data) // b.data is filled again
	} else {
		h[eventbatch.HeaderEncoding] = b.compression
	}
	b.sealed = append(b.sealed, bus.Message{Stream: bus.Findings, Cluster: b.cluster, ID: id, Data: data, Header: h})
	b.data, b.n = b.data[:0], 0
	b.ids.Reset()
}

// messages seals the last message and returns every message of the batch.
func (b *findingBatch) messages() []bus.Message {
	b.seal()
	return b.sealed
}
