package scan

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkScan measures `classify scan --target-version 1.25` over the genuine events of
// examples/audit.log, twenty times over (~2.8 MB): loading the catalogue, reading, decoding,
// classifying, de-duplicating and writing JSON lines (discarded).
func BenchmarkScan(b *testing.B) {
	one, err := os.ReadFile("../../../examples/audit.log")
	if err != nil {
		b.Fatal(err)
	}
	in := bytes.Repeat(one, 20)
	f := filepath.Join(b.TempDir(), "audit.log")
	if err := os.WriteFile(f, in, 0o644); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if code := Main([]string{"--target-version", "1.25", "--progress", "never", f}, nil, io.Discard, io.Discard); code == ExitError {
			b.Fatalf("exit %d", code)
		}
	}
}
