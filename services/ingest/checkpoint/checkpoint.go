// Package checkpoint persists how far ingest has read an audit log: which file (device, inode
// and a fingerprint of its first bytes) and the offset after the last acknowledged line.
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
	"time"
)

// FingerprintSize is how many leading bytes of a file identify it.
const FingerprintSize = 1024

// File identifies one audit log file independently of its name, so it is recognised after a
// rename (same device and inode) or a copy or compression (same first bytes).
type File struct {
	// Path is the name the file had when the position was taken (for logs).
	Path string `json:"path"`
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
	// Fingerprint is the hex SHA-256 of the first FingerprintLen bytes of the content
	// (decompressed for a .gz file).
	Fingerprint    string `json:"fingerprint"`
	FingerprintLen int    `json:"fingerprint_len"`
}

// Fingerprint returns the fingerprint of head, the first bytes of a file (at most
// FingerprintSize are used).
func Fingerprint(head []byte) (string, int) {
	if len(head) > FingerprintSize {
		head = head[:FingerprintSize]
	}
	sum := sha256.Sum256(head)
	return hex.EncodeToString(sum[:]), len(head)
}

// SameContent reports whether head (the first bytes of another file) starts like f.
func (f File) SameContent(head []byte) bool {
	if len(head) < f.FingerprintLen {
		return false
	}
	fp, _ := Fingerprint(head[:f.FingerprintLen])
	return fp == f.Fingerprint
}

// Position is a checkpoint: everything before Offset in File was acknowledged by the bus.
type Position struct {
	File   File  `json:"file"`
	Offset int64 `json:"offset"`
	// Rotated is the rotation time encoded in the file's name when it was a rotated sibling,
	// zero for the active file.
	Rotated time.Time `json:"rotated,omitzero"`
	// SeenActive is the last time the file was seen as the active file: a rotated sibling
	// newer than it was rotated later.
	SeenActive time.Time `json:"seen_active,omitzero"`
	// Saved is when the checkpoint was written.
	Saved time.Time `json:"saved"`
}

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
func (s *Store) Load() (p Position, ok bool, err error) {
	b, err := os.ReadFile(s.Path())
	if errors.Is(err, fs.ErrNotExist) {
		return Position{}, false, nil
	}
	if err != nil {
		return Position{}, false, fmt.Errorf("read checkpoint: %w", err)
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return Position{}, false, fmt.Errorf("checkpoint %s is corrupt (remove it to start over): %w", s.Path(), err)
	}
	if p.Offset < 0 || p.File.FingerprintLen < 0 || p.File.FingerprintLen > FingerprintSize {
		return Position{}, false, fmt.Errorf("checkpoint %s is corrupt (remove it to start over): offset %d", s.Path(), p.Offset)
	}
	return p, true, nil
}

// Save replaces the checkpoint atomically: write a temporary file, fsync, rename, fsync the
// directory. A crash leaves either the old or the new checkpoint.
func (s *Store) Save(p Position) error {
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	tmp, err := os.CreateTemp(s.dir, s.name+".tmp*")
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync checkpoint: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.Path()); err != nil {
		return fmt.Errorf("replace checkpoint: %w", err)
	}
	if d, err := os.Open(s.dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
