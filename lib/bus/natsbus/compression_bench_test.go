package natsbus_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
)

// BenchmarkStreamCompression answers issue 14's question of where to compress events: in the
// EventBatch (ingest compresses, classify decompresses: what auditlens does) or in the stream
// (JetStream's own `compression: s2`, the server compresses the blocks it writes and
// decompresses the ones it reads), with no compression as the baseline, in the same run. Each
// case publishes 60,000 events in EventBatch messages to a file stream of an in-process server
// and reads them all back through a pull consumer down to the events (the genuine events of
// examples/audit.log in turn, each copy with its own audit id, so that a batch or a block
// holds each event about twice, as an apiserver's log repeats its watches and lists); the process holds client and server, so cpu-us/event is the whole cost. It reports
// the bytes on the wire per event (what a client sends and receives, also what a replica is
// sent) and on disk per event.
//
//	go test -run '^$' -bench StreamCompression -benchtime 3x ./bus/natsbus/
func BenchmarkStreamCompression(b *testing.B) {
	evs := auditLogEvents(b, 60_000)
	for _, c := range []struct {
		name   string
		batch  string
		stream jetstream.StoreCompression
	}{
		{"baseline=none", eventbatch.CompressionNone, jetstream.NoCompression},
		{"batch=s2", eventbatch.CompressionS2, jetstream.NoCompression},
		{"stream=s2", eventbatch.CompressionNone, jetstream.S2Compression},
		{"batch=zstd", eventbatch.CompressionZstd, jetstream.NoCompression},
	} {
		b.Run(c.name, func(b *testing.B) {
			cfg := eventbatch.DefaultConfig()
			cfg.Compression = c.batch
			var wire, disk int64
			var pubCPU, readCPU time.Duration
			for range b.N {
				w, d, p, r := compressionRound(b, cfg, c.stream, evs)
				wire, disk, pubCPU, readCPU = wire+w, disk+d, pubCPU+p, readCPU+r
			}
			n := float64(b.N * len(evs))
			b.ReportMetric(float64(wire)/n, "wire-bytes/event")
			b.ReportMetric(float64(disk)/n, "disk-bytes/event")
			b.ReportMetric(float64(pubCPU.Microseconds())/n, "publish-cpu-us/event")
			b.ReportMetric(float64(readCPU.Microseconds())/n, "read-cpu-us/event")
			b.ReportMetric(float64((pubCPU+readCPU).Microseconds())/n, "cpu-us/event")
			b.ReportMetric(n/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// compressionRound publishes evs in batches of cfg to a fresh stream compressed with sc and
// reads them back; it returns the payload bytes, the stream's bytes on disk and the process
// CPU time of each half.
func compressionRound(b *testing.B, cfg eventbatch.Config, sc jetstream.StoreCompression, evs [][]byte) (wire, disk int64, pubCPU, readCPU time.Duration) {
	b.Helper()
	dir := b.TempDir()
	srv, err := natsbus.StartServer(dir, "")
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(256))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EV", Subjects: []string{"ev"}, Storage: jetstream.FileStorage, Compression: sc})
	if err != nil {
		b.Fatal(err)
	}

	p := eventbatch.NewPacker(cfg, "prod", "prod/file/fp", eventbatch.ByRange, nil)
	start := cpuTime(b)
	var msgs int
	publish := func(data []byte, h map[string]string) {
		m := nats.NewMsg("ev")
		m.Data = data
		for k, v := range h {
			m.Header.Set(k, v)
		}
		if _, err := js.PublishMsgAsync(m); err != nil {
			b.Fatal(err)
		}
		wire += int64(len(data))
		msgs++
	}
	for i, ev := range evs {
		for _, m := range p.Add(nil, ev, strconv.Itoa(i)) {
			publish(m.Data, m.Header)
		}
	}
	for _, m := range p.Flush(nil) {
		publish(m.Data, m.Header)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("publishes not acknowledged after a minute")
	}
	pubCPU = cpuTime(b) - start

	start = cpuTime(b)
	cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy})
	if err != nil {
		b.Fatal(err)
	}
	var got int
	var events [][]byte
	var buf []byte
	for read := 0; read < msgs; {
		batch, err := cons.FetchNoWait(500)
		if err != nil {
			b.Fatal(err)
		}
		for m := range batch.Messages() {
			h := map[string]string{}
			for k := range m.Headers() {
				h[k] = m.Headers().Get(k)
			}
			if events, buf, err = eventbatch.Events(h, m.Data(), buf, events[:0]); err != nil {
				b.Fatal(err)
			}
			got += len(events)
			read++
		}
		if batch.Error() != nil {
			b.Fatal(batch.Error())
		}
	}
	readCPU = cpuTime(b) - start
	if got != len(evs) {
		b.Fatalf("read %d events back, want %d", got, len(evs))
	}
	return wire, dirBytes(b, dir), pubCPU, readCPU
}

// auditLogEvents are n events: those of examples/audit.log in turn, each copy's audit id
// made unique.
func auditLogEvents(b *testing.B, n int) [][]byte {
	data, err := os.ReadFile("../../../examples/audit.log")
	if err != nil {
		b.Fatal(err)
	}
	var src [][]byte
	for l := range bytes.SplitSeq(data, []byte("\n")) {
		if len(l) > 0 {
			src = append(src, l)
		}
	}
	key := []byte(`"auditID":"`)
	out := make([][]byte, n)
	for i := range out {
		ev := bytes.Clone(src[i%len(src)])
		at := bytes.Index(ev, key)
		if at < 0 || len(ev) < at+len(key)+36 {
			b.Fatalf("event %d of examples/audit.log has no audit id", i%len(src))
		}
		id := fmt.Appendf(nil, "%036d", i)
		copy(ev[at+len(key):], id)
		out[i] = ev
	}
	return out
}

// cpuTime is the process's user and system time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func dirBytes(b *testing.B, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		n += info.Size()
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}
