// Package checkpoint persists how far ingest has read an audit log: the tail.Position (file by
// device, inode and a fingerprint of its first bytes, offset) after the last acknowledged line.
package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/auditlens/auditlens/services/ingest/tail"
)

// Store keeps one checkpoint file in a directory, replaced atomically on every Save.
type Store struct {
	dir  string
	name string
}

// Open returns the store for the audit log at logPath, creating dir when missing.
func Open(dir, logPath string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create --checkpoint-dir %s: %w", dir, err)
	}
	abs, err := filepath.Abs(logPath)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", logPath, err)
	}
	sum := sha256.Sum256([]byte(abs))
	return &Store{dir: dir, name: "ingest-" + hex.EncodeToString(sum[:8]) + ".json"}, nil
}

// Path is the checkpoint file.
func (s *Store) Path() string { return filepath.Join(s.dir, s.name) }

// Load returns the saved position, or ok=false when there is none yet.
func (s *Store) Load() (p tail.Position, ok bool, err error) {
	b, err := os.ReadFile(s.Path())
	if errors.Is(err, fs.ErrNotExist) {
		return tail.Position{}, false, nil
	}
	if err != nil {
		return tail.Position{}, false, fmt.Errorf("read checkpoint: %w", err)
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return tail.Position{}, false, fmt.Errorf("checkpoint %s is corrupt (remove it to start over): %w", s.Path(), err)
	}
	if p.Offset < 0 || p.File.FingerprintLen < 0 || p.File.FingerprintLen > tail.FingerprintSize {
		return tail.Position{}, false, fmt.Errorf("checkpoint %s is corrupt (remove it to start over): offset %d", s.Path(), p.Offset)
	}
	return p, true, nil
}

// Save replaces the checkpoint atomically (see Replace).
func (s *Store) Save(p tail.Position) error {
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	if err := Replace(s.Path(), append(b, '\n')); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	return nil
}

// Replace replaces the file at path with data atomically: write a temporary file beside it,
// fsync, rename, fsync the directory. A crash leaves either the old content or the new.
func Replace(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
