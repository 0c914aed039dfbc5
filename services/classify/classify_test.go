package classify

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/lib/daemon"
)

// The flags start from DefaultConfig: parsing no arguments leaves it as it was, and it is valid.
func TestFlagsDefaultToDefaultConfig(t *testing.T) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("classify", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg, DefaultConfig()) {
		t.Errorf("after parsing no flags %+v, want %+v", cfg, DefaultConfig())
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("DefaultConfig: %v", err)
	}
	if err := fs.Parse([]string{"--classify-workers", "5", "--classify-batch-wait", "1s"}); err != nil {
		t.Fatal(err)
	}
	if cfg.Workers != 5 || cfg.BatchWait.String() != "1s" {
		t.Errorf("flags not parsed into cfg: %+v", cfg)
	}
}

// Zero is no longer "the default": a value that means nothing is refused, naming its flag.
func TestValidateRefusesZero(t *testing.T) {
	for name, set := range map[string]func(*Config){
		"--classify-workers 0":      func(c *Config) { c.Workers = 0 },
		"--classify-batch-size 0":   func(c *Config) { c.BatchSize = 0 },
		"--classify-batch-wait 0s":  func(c *Config) { c.BatchWait = 0 },
		"--classify-ack-wait 0s":    func(c *Config) { c.AckWait = 0 },
		"--classify-group is empty": func(c *Config) { c.Group = "" },
	} {
		if err := configWith(set).Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A rules file is only opened by Validate; its content is read and checked once, by New,
// which names the line and column of a mistake.
func TestRulesFileLoadedByNew(t *testing.T) {
	f := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(f, []byte("schema_version: 1\nrules:\n  - id: x\n    severity: loud\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := configWith(func(c *Config) { c.RulesFiles = []string{f} })
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	_, err := New(cfg, daemon.Deps{Bus: discardBus{}})
	if err == nil || !strings.Contains(err.Error(), f+":4:") || !strings.Contains(err.Error(), `severity "loud"`) {
		t.Errorf("New: %v, want the file's line 4 and the bad severity", err)
	}
}
