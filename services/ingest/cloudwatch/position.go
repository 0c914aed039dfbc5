package cloudwatch

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
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

// store keeps one Position in two files of the checkpoint directory, named after the log
// group and stream prefix: a snapshot (the whole position as JSON, replaced atomically) and a
// journal of the changes since (one JSON line per save: the new From and the ids stored
// since the last save). A save appends to the journal, so a poll writes what it stored, not
// the whole overlap again; once the journal outgrows the snapshot, the next save writes a new
// snapshot and empties the journal (the bytes written stay within a small multiple of the ids
// stored). Loading merges the two: From is the largest, the ids their union, pruned to From.
// Both are idempotent, so a crash between the snapshot's replacement and the journal's
// truncation, or a journal line cut short, loses nothing but the ids of that line (read again,
// they are dropped by the bus by id).
type store struct {
	path, journal string
	snapshot      int64 // size of the snapshot, 0 before the first
	journaled     int64 // size of the journal
	// written and largest count the bytes saved and the largest snapshot (for tests).
	written, largest int64
}

// minSnapshot is the journal size under which a save never rewrites the snapshot.
const minSnapshot = 64 << 10

// delta is one line of the journal.
type delta struct {
	From int64            `json:"from"`
	Seen map[string]int64 `json:"seen,omitempty"`
}

func openStore(dir, group, prefix string) (*store, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create the checkpoint dir: %w", err)
	}
	sum := sha256.Sum256([]byte(group + "\x00" + prefix))
	base := filepath.Join(dir, "cloudwatch-"+hex.EncodeToString(sum[:8]))
	return &store{path: base + ".json", journal: base + ".journal"}, nil
}

// load returns the saved position; ok is false when there is none yet. A journal line that
// does not decode (the last one, cut by a crash) ends the journal.
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
	s.snapshot = int64(len(b))
	if p.Seen == nil {
		p.Seen = map[string]int64{}
	}
	j, err := os.ReadFile(s.journal)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return p, false, fmt.Errorf("read the CloudWatch position's journal: %w", err)
	}
	s.journaled = int64(len(j))
	for len(j) > 0 {
		line, rest, _ := bytes.Cut(j, []byte{'\n'})
		j = rest
		var d delta
		if len(rest) == 0 && len(line) > 0 && !json.Valid(line) {
			break // the last line, cut short by a crash
		}
		if err := json.Unmarshal(line, &d); err != nil {
			return p, false, fmt.Errorf("decode the CloudWatch position's journal %s: %w", s.journal, err)
		}
		p.From = max(p.From, d.From)
		maps.Copy(p.Seen, d.Seen)
	}
	p.prune()
	return p, true, nil
}

// save records p, whose ids added since the last save are added: appended to the journal,
// or, the first time and when the journal has outgrown the snapshot, as a new snapshot.
func (s *store) save(p *Position, added map[string]int64) error {
	line, err := json.Marshal(delta{From: p.From, Seen: added})
	if err != nil {
		return fmt.Errorf("encode the CloudWatch position: %w", err)
	}
	line = append(line, '\n')
	if s.snapshot == 0 || s.journaled+int64(len(line)) > max(s.snapshot, minSnapshot) {
		return s.saveSnapshot(p)
	}
	f, err := os.OpenFile(s.journal, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("save the CloudWatch position: %w", err)
	}
	_, err = f.Write(line)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("save the CloudWatch position: %w", err)
	}
	s.journaled += int64(len(line))
	s.written += int64(len(line))
	return nil
}

// saveSnapshot replaces the snapshot atomically (checkpoint.Replace), then empties the
// journal: a crash leaves the old position or the new one, with a journal that the new one
// already holds.
func (s *store) saveSnapshot(p *Position) error {
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode the CloudWatch position: %w", err)
	}
	b = append(b, '\n')
	if err := checkpoint.Replace(s.path, b); err != nil {
		return fmt.Errorf("save the CloudWatch position: %w", err)
	}
	if err := os.Truncate(s.journal, 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("empty the CloudWatch position's journal: %w", err)
	}
	s.snapshot, s.journaled = int64(len(b)), 0
	s.written += int64(len(b))
	s.largest = max(s.largest, int64(len(b)))
	return nil
}
