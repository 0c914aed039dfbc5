package checkpoint_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/services/ingest/checkpoint"
	"github.com/auditlens/auditlens/services/ingest/tail"
)

func TestSaveLoad(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	s, err := checkpoint.Open(dir, "/var/log/audit.log")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Load(); ok || err != nil {
		t.Fatalf("fresh store: ok=%v err=%v", ok, err)
	}
	fp, n := tail.Fingerprint([]byte(strings.Repeat("x", 5000)))
	want := tail.Position{
		File:   tail.File{Path: "/var/log/audit.log", Dev: 1, Ino: 2, Fingerprint: fp, FingerprintLen: n},
		Offset: 12345, SeenActive: time.Unix(100, 0).UTC(), Saved: time.Unix(200, 0).UTC(),
	}
	if n != tail.FingerprintSize {
		t.Errorf("fingerprint of %d bytes, want %d", n, tail.FingerprintSize)
	}
	for i := 0; i < 3; i++ {
		want.Offset += int64(i)
		if err := s.Save(want); err != nil {
			t.Fatal(err)
		}
	}
	got, ok, err := s.Load()
	if err != nil || !ok {
		t.Fatalf("load: ok=%v err=%v", ok, err)
	}
	if got != want {
		t.Errorf("loaded %+v, want %+v", got, want)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("%d files in the checkpoint dir, want 1 (no temporary files left)", len(ents))
	}
	// Another log has its own checkpoint.
	other, _ := checkpoint.Open(dir, "/var/log/other.log")
	if _, ok, _ := other.Load(); ok {
		t.Error("a second log shares the first one's checkpoint")
	}
}

func TestCorruptCheckpointNamesTheFile(t *testing.T) {
	s, err := checkpoint.Open(t.TempDir(), "audit.log")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.Path(), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Load()
	if err == nil || !strings.Contains(err.Error(), s.Path()) {
		t.Fatalf("error %v does not name %s", err, s.Path())
	}
}
