package auditevent

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// benchInputs are the ~1.2 KB Metadata and ~8 KB RequestResponse events of testdata/bench.
var benchInputs = []struct{ name, file string }{
	{"metadata-1.2KB", "testdata/bench/metadata-1.2k.json"},
	{"requestresponse-8KB", "testdata/bench/requestresponse-8k.json"},
}

func loadBench(b *testing.B, file string) []byte {
	data, err := os.ReadFile(file)
	if err != nil {
		b.Fatal(err)
	}
	return bytes.TrimSpace(data)
}

// BenchmarkDecode compares the fast decoder with encoding/json into auditv1.Event, the
// baseline, in the same run; peek is what ingest reads of each event (its identity).
func BenchmarkDecode(b *testing.B) {
	for _, in := range benchInputs {
		data := loadBench(b, in.file)
		b.Run(in.name+"/fast", func(b *testing.B) {
			d := NewDecoder(1 << 20)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				ev, err := d.DecodeEvent(data)
				if err != nil || ev.AuditID == "" {
					b.Fatal(err)
				}
			}
		})
		b.Run(in.name+"/fast+body", func(b *testing.B) {
			d := NewDecoder(1 << 20)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				ev, err := d.DecodeEvent(data)
				if err != nil {
					b.Fatal(err)
				}
				ev.RequestObject()
			}
		})
		b.Run(in.name+"/encoding-json", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				var ev auditv1.Event
				if err := json.Unmarshal(data, &ev); err != nil || ev.AuditID == "" {
					b.Fatal(err)
				}
			}
		})
		b.Run(in.name+"/peek", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Peek(data, 1<<20); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeCorpus decodes the real-world corpus's events of 1 to 1.5 KB (the events of
// classify's BenchmarkScanParallel) one after another; the metric is per event.
func BenchmarkDecodeCorpus(b *testing.B) {
	files, _ := filepath.Glob("testdata/real-world/*.jsonl")
	var events [][]byte
	size := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range bytes.Split(data, []byte{'\n'}) {
			if ref, err := Peek(l, 0); err == nil && ref.AuditID != "" && len(l) >= 1000 && len(l) <= 1500 {
				events = append(events, l)
				size += len(l)
			}
		}
	}
	if len(events) < 100 {
		b.Fatalf("%d events", len(events))
	}
	d := NewDecoder(1 << 20)
	b.SetBytes(int64(size / len(events)))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := d.DecodeEvent(events[i]); err != nil {
			b.Fatal(err)
		}
		if i++; i == len(events) {
			i = 0
		}
	}
}
