package eventbatch_test

import (
	"strconv"
	"testing"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
)

// BenchmarkPack packs and reads back real audit events with each compression: the CPU per
// event a batch costs ingest (pack) and classify (read), and the bytes the bus stores per
// event (bus-bytes/event; the events themselves are the baseline, input-bytes/event). A batch
// holds each of the genuine events once (no repeats to flatter the compression).
//
//	go test -run '^$' -bench Pack ./bus/eventbatch/
func BenchmarkPack(b *testing.B) {
	evs := realEvents(b)
	var in int
	for _, ev := range evs {
		in += len(ev)
	}
	for _, c := range []string{eventbatch.CompressionNone, eventbatch.CompressionS2, eventbatch.CompressionZstd} {
		cfg := eventbatch.DefaultConfig()
		cfg.Compression, cfg.MaxEvents = c, len(evs)
		b.Run("pack/"+c, func(b *testing.B) {
			p := eventbatch.NewPacker(cfg, "prod", "prod/file/fp", eventbatch.ByRange, nil)
			b.SetBytes(int64(in / len(evs)))
			b.ReportAllocs()
			var out []bus.Message
			var stored int
			for i := range b.N {
				out = p.Add(out[:0], evs[i%len(evs)], strconv.Itoa(i))
				for _, m := range out {
					stored += len(m.Data)
				}
			}
			for _, m := range p.Flush(out[:0]) {
				stored += len(m.Data)
			}
			b.ReportMetric(float64(stored)/float64(b.N), "bus-bytes/event")
			b.ReportMetric(float64(in)/float64(len(evs)), "input-bytes/event")
		})
		b.Run("read/"+c, func(b *testing.B) {
			msgs := pack(cfg, eventbatch.ByRange, evs)
			b.SetBytes(int64(in / len(evs)))
			b.ReportAllocs()
			var got [][]byte
			var buf []byte
			n := 0
			for n < b.N {
				for _, m := range msgs {
					var err error
					if got, buf, err = eventbatch.Events(m.Header, m.Data, buf, got[:0]); err != nil {
						b.Fatal(err)
					}
					n += len(got)
				}
			}
		})
	}
}
