package envelope

import (
	"bytes"
	"os"
	"testing"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/envelope/envelopetest"
)

// BenchmarkPlain: on plain audit lines, reading through Decoder.Decode (envelope detection
// included) against the plain auditevent decode, the baseline, in the same run; and ingest's
// Peek, which the envelope path follows only on failure.
func BenchmarkPlain(b *testing.B) {
	for _, in := range []struct{ name, file string }{
		{"metadata-1.2KB", "../auditevent/testdata/bench/metadata-1.2k.json"},
		{"requestresponse-8KB", "../auditevent/testdata/bench/requestresponse-8k.json"},
	} {
		raw, err := os.ReadFile(in.file)
		if err != nil {
			b.Fatal(err)
		}
		data := bytes.TrimSpace(raw)
		nop := func(*auditevent.Event) error { return nil }
		b.Run(in.name+"/auditevent", func(b *testing.B) {
			dec := auditevent.NewDecoder(1 << 20)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if err := dec.Decode(data, nop); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(in.name+"/envelope", func(b *testing.B) {
			d, dec := NewDecoder(0), auditevent.NewDecoder(1<<20)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := d.Decode(dec, data, nop); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEnvelope: the cost of unwrapping, per event, for the common envelopes (no
// baseline beyond the plain decode above: the envelope is extra work by nature).
func BenchmarkEnvelope(b *testing.B) {
	plain := inputs(b, "../auditevent/testdata/real-world/k8s-perf-tests-gce-scale.jsonl")
	aks := inputs(b, "testdata/managed/aks-eventhub-records-sysdiglabs.json")[0]
	gke := inputs(b, "testdata/managed/gke-logentry-khi.jsonl")[0]
	for _, in := range []struct {
		name string
		data []byte
	}{
		{"eks-subscription-gzip", envelopetest.Gzip(envelopetest.Subscription(plain))},
		{"aks-records", aks},
		{"gke-logentry", gke},
	} {
		b.Run(in.name, func(b *testing.B) {
			d, dec := NewDecoder(0), auditevent.NewDecoder(1<<20)
			nop := func(*auditevent.Event) error { return nil }
			b.SetBytes(int64(len(in.data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := d.Decode(dec, in.data, nop); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
