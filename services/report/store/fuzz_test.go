package store

import (
	"testing"

	"google.golang.org/protobuf/proto"

	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
)

// FuzzAppendBatch feeds arbitrary bytes to the findings decoder report runs on every bus
// message: it must return an error, never panic (a panic would crash report, and the
// redelivered message crash it again), and leave the block consistent either way.
func FuzzAppendBatch(f *testing.F) {
	batch := &auditlensv1.FindingBatch{Findings: sample()}
	b, err := proto.Marshal(batch)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	for _, fd := range sample() {
		one, _ := proto.Marshal(fd)
		f.Add(one)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var blk Block
		blk.Append(sample()[0])
		_, _ = blk.AppendBatch(data, "c", func(int, []byte, error) error { return nil })
		_ = blk.AppendWire(data, "c")
		for i := range blk.Len() {
			_ = blk.row(i, ingested)
		}
	})
}
