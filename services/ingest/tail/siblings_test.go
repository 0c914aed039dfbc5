package tail

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Every naming of rotated files is listed, oldest first; other files are not.
func TestListRotatedNamings(t *testing.T) {
	dir := t.TempDir()
	active := filepath.Join(dir, "audit.log")
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	files := []struct {
		name string
		age  time.Duration // modification time before base+1h
	}{
		{"audit.log", 0},
		{"audit.log.3.gz", 5 * time.Minute},
		{"audit.log.2", 4 * time.Minute},
		{"audit.log.1", 3 * time.Minute},
		{"audit.log-20261030.gz", 50 * time.Hour},
		{"audit-2026-11-01T00-30-00.000.log.gz", 0},
		{"audit-2026-11-01T00-20-00.000.log", 0},
		{"audit.log.bak", 0},
		{"audit.log.1.tmp", 0},
		{"other.log.1", 0},
	}
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		if err := os.WriteFile(p, []byte(f.name+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		mt := base.Add(time.Hour - f.age)
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	sibs, err := listRotated(active)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range sibs {
		got = append(got, filepath.Base(s.path))
	}
	want := []string{"audit.log-20261030.gz", "audit-2026-11-01T00-20-00.000.log", "audit-2026-11-01T00-30-00.000.log.gz", "audit.log.3.gz", "audit.log.2", "audit.log.1"}
	if len(got) != len(want) {
		t.Fatalf("listed %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("listed %q, want %q", got, want)
		}
	}
}
