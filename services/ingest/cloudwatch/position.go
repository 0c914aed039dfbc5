package cloudwatch

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/auditlens/auditlens/services/ingest/checkpoint"
)

// Position is where reading resumes: the next scan asks for events from From (epoch
// milliseconds) on, and skips those in Seen, the events at or after From that the bus has
// already acknowledged (CloudWatch event id -> timestamp).
type Position struct {
	LogGroup     string           `json:"logGroup"`
	StreamPrefix string           `json:"streamPrefix"`
	From         int64            `json:"from"`
	Seen         map[string]int64 `json:"seen"`
}

// prune forgets the seen events older than From: no scan asks for them again.
func (p *Position) prune() {
	for id, ts := range p.Seen {
		if ts < p.From {
			delete(p.Seen, id)
		}
	}
}

// bound forgets the oldest seen events past max; it returns how many.
func (p *Position) bound(max int) int {
	over := len(p.Seen) - max
	if over <= 0 {
		return 0
	}
	ts := make([]int64, 0, len(p.Seen))
	for _, t := range p.Seen {
		ts = append(ts, t)
	}
	slices.Sort(ts)
	cut := ts[over] // forget those older than the over-th oldest, then ties up to over
	n := 0
	for id, t := range p.Seen {
		if t < cut {
			delete(p.Seen, id)
			n++
		}
	}
	for id, t := range p.Seen {
		if n >= over {
			break
		}
		if t == cut {
			delete(p.Seen, id)
			n++
		}
	}
	return n
}

// store keeps one Position in a file of the checkpoint directory, named after the log group
// and stream prefix.
type store struct {
	path string
	// written and largest count the bytes saved and the largest file (for tests).
	written, largest int64
}

func openStore(dir, group, prefix string) (*store, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create the checkpoint dir: %w", err)
	}
	sum := sha256.Sum256([]byte(group + "\x00" + prefix))
	return &store{path: filepath.Join(dir, "cloudwatch-"+hex.EncodeToString(sum[:8])+".json")}, nil
}

// load returns the saved position; ok is false when there is none yet.
func (s *store) load() (p Position, ok bool, err error) {
	b, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return p, false, nil
	}
	if err != nil {
		return p, false, fmt.Errorf("read the CloudWatch position: %w", err)
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, false, fmt.Errorf("decode the CloudWatch position %s: %w", s.path, err)
	}
	if p.Seen == nil {
		p.Seen = map[string]int64{}
	}
	return p, true, nil
}

// save replaces the position atomically (checkpoint.Replace): a crash leaves the old
// position or the new one.
func (s *store) save(p *Position) error {
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode the CloudWatch position: %w", err)
	}
	if err := checkpoint.Replace(s.path, append(b, '\n')); err != nil {
		return fmt.Errorf("save the CloudWatch position: %w", err)
	}
	s.written += int64(len(b) + 1)
	s.largest = max(s.largest, int64(len(b)+1))
	return nil
}
