package tail

import (
	"crypto/sha256"
	"encoding/hex"
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

// Position is where a Follower is (or resumes): everything before Offset in File was handed
// out. Once those lines are acknowledged it is the checkpoint (package checkpoint keeps it).
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

// SamePlace reports whether p and q are the same offset of the same file (the times aside).
func (p Position) SamePlace(q Position) bool {
	return p.Offset == q.Offset && p.File.Dev == q.File.Dev && p.File.Ino == q.File.Ino && p.File.Fingerprint == q.File.Fingerprint
}
