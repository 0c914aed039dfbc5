package auditevent

import (
	"bytes"
	"testing"
)

// BenchmarkDecodeEscaped is BenchmarkDecode's Metadata event with every '/' written "\/"
// (valid JSON, the same event): each string with a slash takes the unescaping path, which
// the plain events rarely do.
func BenchmarkDecodeEscaped(b *testing.B) {
	data := bytes.ReplaceAll(loadBench(b, benchInputs[0].file), []byte("/"), []byte(`\/`))
	d := NewDecoder(1 << 20)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		ev, err := d.DecodeEvent(data)
		if err != nil || ev.AuditID == "" || ev.RequestURI == "" || bytes.Contains([]byte(ev.RequestURI), []byte(`\`)) {
			b.Fatal(err, ev.RequestURI)
		}
	}
}
