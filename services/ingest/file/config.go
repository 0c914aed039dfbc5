package file

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/auditlens/auditlens/services/ingest/tail"
)

// Config configures the file input; start from DefaultConfig.
type Config struct {
	// Path is the audit log to follow (the apiserver's --audit-log-path); empty: off.
	Path          string
	CheckpointDir string
	StartAt       string
	BatchSize     int
	BatchBytes    int
	Publishers    int
	PollInterval  time.Duration
	DrainTimeout  time.Duration
}

// DefaultConfig is the file input's defaults, its checkpoints under dataRoot; off until Path
// is set.
func DefaultConfig(dataRoot string) Config {
	return Config{
		CheckpointDir: filepath.Join(dataRoot, "checkpoints"),
		StartAt:       tail.StartBeginning,
		BatchSize:     4096,
		BatchBytes:    8 << 20,
		Publishers:    2,
		PollInterval:  200 * time.Millisecond,
		DrainTimeout:  30 * time.Second,
	}
}

// RegisterFlags adds --audit-log, --checkpoint-dir, --start-at and the --audit-log-* flags to
// fs, each defaulting to the current value of its field.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Path, "audit-log", c.Path, "follow this audit log `file` (the apiserver's --audit-log-path) and its rotated siblings")
	fs.StringVar(&c.CheckpointDir, "checkpoint-dir", c.CheckpointDir, "`dir` where the read positions of --audit-log and --cloudwatch-log-group are kept")
	fs.StringVar(&c.StartAt, "start-at", c.StartAt, "without a checkpoint, start at the beginning (oldest rotated file) or the end of the audit log")
	fs.IntVar(&c.BatchSize, "audit-log-batch-size", c.BatchSize, "most lines published in one batch")
	fs.IntVar(&c.BatchBytes, "audit-log-batch-bytes", c.BatchBytes, "most `bytes` published in one batch")
	fs.IntVar(&c.Publishers, "audit-log-publishers", c.Publishers, "batches published concurrently (checkpoints still advance in order)")
	fs.DurationVar(&c.PollInterval, "audit-log-poll-interval", c.PollInterval, "how often an idle audit log is checked for new lines and rotation")
	fs.DurationVar(&c.DrainTimeout, "audit-log-drain-timeout", c.DrainTimeout, "on shutdown, how long read lines may wait for the bus")
}

// On reports whether the file input is configured.
func (c Config) On() bool { return c.Path != "" }

// Memory is about the most memory the input holds at once: the lines and messages of up to
// Publishers batches being published, the ones waiting for their turn to be checkpointed and
// the one being read (BatchBytes each).
func (c Config) Memory() int64 { return int64(c.Publishers+2) * int64(c.BatchBytes) }

// Validate checks the flags, naming the one at fault.
func (c Config) Validate() error {
	if c.Path == "" {
		return nil
	}
	if err := (tail.Config{Path: c.Path, StartAt: c.StartAt}).Validate(); err != nil {
		return err
	}
	if fi, err := os.Stat(c.Path); err == nil && fi.IsDir() {
		return fmt.Errorf("--audit-log %s is a directory: give the audit log file", c.Path)
	}
	if c.CheckpointDir == "" {
		return errors.New("--audit-log needs --checkpoint-dir")
	}
	if c.BatchSize <= 0 || c.BatchBytes <= 0 || c.Publishers <= 0 {
		return errors.New("--audit-log-batch-size, --audit-log-batch-bytes and --audit-log-publishers must be positive")
	}
	if c.PollInterval <= 0 || c.DrainTimeout <= 0 {
		return errors.New("--audit-log-poll-interval and --audit-log-drain-timeout must be positive")
	}
	return nil
}
